"""The DocMemo environment. Importing the package registers DocMemo-v0 with its event kinds, episode metrics
and anchor states, and names its hooks (``hooks.py``; the env class and the hooks are imported lazily)."""

from ragym.envs.docmemo import anchors, events, metrics  # noqa: F401  (importing them registers them)
from ragym.envs.registry import register_env

register_env(
    "DocMemo-v0",
    "ragym.envs.docmemo.env:DocMemoEnv",
    searches_service=True,
    hooks="ragym.envs.docmemo.hooks:HOOKS",
)
