"""The KB-VQA (MMAgent-R²) environment. Importing the package registers KBVQA-v0 and KBVQA-Demo-v0 with its event kinds, episode metrics
and anchor states (the env class itself is imported lazily, by gymnasium)."""

from ragym.envs.kbvqa import anchors, events, metrics  # noqa: F401  (importing them registers them)
from ragym.envs.registry import register_env

register_env("KBVQA-v0", "ragym.envs.kbvqa.env:KBVQAEnv", searches_service=True)
register_env(
    "KBVQA-Demo-v0", "ragym.envs.kbvqa.demo:KBVQADemoEnv", searches_service=True
)  # KBVQA-v0 plus the CPU demo's aids
