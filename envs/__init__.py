"""ragym environments. Importing this package registers every environment with gymnasium: ragym's own, then
those of installed packages that name themselves in the ``ragym.envs`` entry-point group."""

# Each env package, imported, registers its env ids, event kinds, metrics, anchors and hooks: a new env in ragym
# adds its name here (one outside ragym declares the entry point instead: docs/environments.md).
from ragym.envs import docmemo, kbvqa, memora, r3g  # noqa: F401
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.docmemo.beliefs import PageBeliefs
from ragym.envs.registry import import_env_packages, make_env, register_env, registered_envs
from ragym.envs.retrieval.hits import Hit, Retriever

import_env_packages()

__all__ = [
    "IMAGE_PLACEHOLDER",
    "Hit",
    "PageBeliefs",
    "Retriever",
    "make_env",
    "register_env",
    "registered_envs",
]
