"""ragym environments. Importing this package registers every environment with gymnasium."""

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.docmemo.beliefs import PageBeliefs
from ragym.envs.registry import make_env, register_env, registered_envs
from ragym.envs.retrieval.hits import Hit, Retriever

# Registrations: one line per environment (entry points are imported lazily by gymnasium).
register_env("KBVQA-v0", "ragym.envs.kbvqa.env:KBVQAEnv")
register_env("KBVQA-Demo-v0", "ragym.envs.kbvqa.demo:KBVQADemoEnv")  # KBVQA-v0 plus the CPU demo's aids
register_env("DocMemo-v0", "ragym.envs.docmemo.env:DocMemoEnv")
register_env("MEMORA-v0", "ragym.envs.memora.env:MemoraEnv")
register_env("R3G-v0", "ragym.envs.r3g.env:R3GEnv")

__all__ = [
    "IMAGE_PLACEHOLDER",
    "Hit",
    "PageBeliefs",
    "Retriever",
    "make_env",
    "register_env",
    "registered_envs",
]
