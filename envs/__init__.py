"""ragym environments. Importing this package registers every environment with gymnasium."""

# Each env package, imported, registers its env ids, event kinds, metrics and anchors: a new env adds its name here.
from ragym.envs import docmemo, kbvqa, memora, r3g  # noqa: F401
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.docmemo.beliefs import PageBeliefs
from ragym.envs.registry import make_env, register_env, registered_envs
from ragym.envs.retrieval.hits import Hit, Retriever

__all__ = [
    "IMAGE_PLACEHOLDER",
    "Hit",
    "PageBeliefs",
    "Retriever",
    "make_env",
    "register_env",
    "registered_envs",
]
