"""The KB-VQA (MMAgent-R²) environment. Importing the package registers KBVQA-v0 and KBVQA-Demo-v0 with its event kinds, episode metrics
and anchor states, and names its hooks (``hooks.py``; the env class and the hooks are imported lazily)."""

from ragym.envs.kbvqa import anchors, events, metrics  # noqa: F401  (importing them registers them)
from ragym.envs.registry import register_env

HOOKS = "ragym.envs.kbvqa.hooks:HOOKS"
register_env("KBVQA-v0", "ragym.envs.kbvqa.env:KBVQAEnv", searches_service=True, hooks=HOOKS)
# KBVQA-v0 plus the CPU demo's aids
register_env("KBVQA-Demo-v0", "ragym.envs.kbvqa.demo:KBVQADemoEnv", searches_service=True, hooks=HOOKS)
