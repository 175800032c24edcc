"""The R3G environment. Importing the package registers R3G-v0 with its event kinds, episode metrics
and anchor states, and names its hooks (``hooks.py``; the env class and the hooks are imported lazily)."""

from ragym.envs.r3g import anchors, events, metrics  # noqa: F401  (importing them registers them)
from ragym.envs.registry import register_env

register_env("R3G-v0", "ragym.envs.r3g.env:R3GEnv", hooks="ragym.envs.r3g.hooks:HOOKS")
