"""The MEMORA environment. Importing the package registers MEMORA-v0 with its event kinds, episode metrics
and anchor states, and names its hooks (``hooks.py``; the env class and the hooks are imported lazily)."""

from ragym.envs.memora import anchors, events, metrics  # noqa: F401  (importing them registers them)
from ragym.envs.registry import register_env

# The episodic memory outlives an env instance only through its folder (the agent loop builds one env per episode).
register_env(
    "MEMORA-v0",
    "ragym.envs.memora.env:MemoraEnv",
    shared_state_kwarg="memory_dir",
    hooks="ragym.envs.memora.hooks:HOOKS",
)
