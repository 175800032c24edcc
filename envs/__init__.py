"""ragym environments. Importing this package registers every environment with gymnasium."""

from envs.core import IMAGE_PLACEHOLDER, Hit, Retriever
from envs.page_beliefs import PageBeliefs
from envs.registry import make_env, register_env, registered_envs

# Registrations: one line per environment (entry points are imported lazily by gymnasium).
register_env("KBVQA-v0", "envs.kbvqa:KBVQAEnv")
register_env("KBVQA-Demo-v0", "envs.kbvqa_demo:KBVQADemoEnv")  # KBVQA-v0 plus the CPU demo's aids
register_env("DocMemo-v0", "envs.docmemo:DocMemoEnv")
register_env("MEMORA-v0", "envs.memora:MemoraEnv")
register_env("R3G-v0", "envs.r3g:R3GEnv")

__all__ = [
    "IMAGE_PLACEHOLDER",
    "Hit",
    "PageBeliefs",
    "Retriever",
    "make_env",
    "register_env",
    "registered_envs",
]
