"""Which retrievers a service process serves, by name, with the queries each takes.

The folders come from the envs' hooks (``EnvHooks.services``: each names a ``ragym serve`` flag and loads the
retrievers it serves from the folder), so a new env adds its own folder kind in its own package:

- ``--kb-dir`` (KB-VQA): ``image``, live faiss search over the entity embeddings (vector queries; the hits carry
  the payload the env shows); ``candidates``, the KB's precomputed candidate lists, keyed by absolute query image
  path (text); ``bm25`` over passages and ``dense``, the manifest's text encoder over passage vectors (text), as
  the KB lists them.
- ``--doc-store-root`` (DocMemo): ``pages/<doc_key>``, page search over each document store under it (text).

Any ``NAME=MANIFEST`` shard set is served as a ``ShardedRetriever`` over the manifest's index files (vector
queries), whatever the env.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragym.envs.hooks import ServedFolder, hook, one_env_per_hooks
from ragym.envs.retrieval.service.app import Served
from ragym.envs.retrieval.service.shards import ShardedRetriever


@dataclass(frozen=True)
class CatalogSpec:
    """What one service process loads."""

    folders: tuple[tuple[str, str], ...] = ()
    """(flag, folder) pairs: a folder kind an env's hooks serve (``served_folders``: ``kb-dir``,
    ``doc-store-root``, ...) and the folder of that kind to serve."""
    shard_sets: tuple[tuple[str, str], ...] = ()
    """(name, shard manifest path) pairs, each served as one vector retriever."""
    index_kind: str = "auto"
    """faiss index of a folder's vector retrievers: ``auto``, ``built``, ``flat``, ``hnsw`` or ``ivf``
    (``ragym.envs.kbvqa.kb.KnowledgeBase.image_retriever``)."""
    gpu: int | None = None
    """GPU device for flat indexes (exact search on torch; other kinds stay on the CPU); None searches on CPU."""

    def __post_init__(self) -> None:
        if not self.folders and not self.shard_sets:
            raise ValueError(
                "nothing to serve: give a folder an env serves (ragym serve --help) or a shard manifest"
            )


def served_folders() -> dict[str, ServedFolder]:
    """Every folder kind the registered envs' hooks serve, by flag (KB-VQA's demo env shares KB-VQA's)."""
    found: dict[str, tuple[str, ServedFolder]] = {}
    for env_id in one_env_per_hooks("services"):
        for folder in hook(env_id, "services", "ragym serve"):
            if folder.flag in found:
                raise ValueError(
                    f"ragym serve: --{folder.flag} is served by both {found[folder.flag][0]} and {env_id}"
                )
            found[folder.flag] = (env_id, folder)
    return {flag: folder for flag, (_, folder) in found.items()}


def load_catalog(spec: CatalogSpec) -> dict[str, Served]:
    """Build every retriever ``spec`` names (slow: loads tables, indexes and encoders)."""
    kinds = served_folders() if spec.folders else {}
    served: dict[str, Served] = {}

    def add(retrievers: dict[str, Served], source: str) -> None:
        twice = sorted(set(retrievers) & set(served))
        if twice:
            raise ValueError(f"{source} serves {twice}, already served by another folder or shard set")
        served.update(retrievers)

    for flag, folder in spec.folders:
        if flag not in kinds:
            raise ValueError(f"no env serves a --{flag} folder; the envs' hooks serve {sorted(kinds)}")
        add(kinds[flag].load(Path(folder), spec), f"--{flag} {folder}")
    for name, manifest in spec.shard_sets:
        retriever = ShardedRetriever.from_manifest(manifest, spec.gpu)
        add({name: Served(retriever, "vector", retriever.dim)}, f"--shards {name}={manifest}")
    return served
