"""Which retrievers a KB serves, by name, with the queries each takes.

- ``image``: live faiss search over the entity embeddings (vector queries); the hits carry the payload
  the env shows (name, image path, signature).
- ``candidates``: the KB's precomputed candidate lists, keyed by absolute query image path (text).
- ``bm25``: BM25 over passages (text); ``dense``: the manifest's text encoder over passage vectors (text),
  when the KB names one.
- ``pages/<doc_key>``: DocMemo page search over each document store under ``doc_store_root`` (text).
- any ``NAME=MANIFEST`` shard set: a ``ShardedRetriever`` over the manifest's index files (vector queries).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragym.envs.retrieval.retrievers import IndexSpec
from ragym.envs.retrieval.service.app import Served
from ragym.envs.retrieval.service.shards import ShardedRetriever, to_gpu


@dataclass(frozen=True)
class CatalogSpec:
    """What one service process loads."""

    kb_dir: str | None = None
    """KB-VQA knowledge base folder (``ragym.envs.kbvqa.kb`` format); None serves no KB retrievers."""
    doc_store_root: str | None = None
    """Folder of DocMemo document stores (one per document); None serves no page search."""
    shard_sets: tuple[tuple[str, str], ...] = ()
    """(name, shard manifest path) pairs, each served as one vector retriever."""
    index_kind: str = "auto"
    """faiss index of the ``image`` retriever: ``auto``, ``built``, ``flat``, ``hnsw`` or ``ivf``
    (``ragym.envs.kbvqa.kb.KnowledgeBase.image_retriever``)."""
    gpu: int | None = None
    """GPU device for faiss indexes (faiss GPU build); None searches on CPU."""

    def __post_init__(self) -> None:
        if self.kb_dir is None and self.doc_store_root is None and not self.shard_sets:
            raise ValueError("nothing to serve: give a KB folder, a document store root or a shard manifest")


def load_catalog(spec: CatalogSpec) -> dict[str, Served]:
    """Build every retriever ``spec`` names (slow: loads tables, indexes and encoders)."""
    served: dict[str, Served] = {}
    if spec.kb_dir is not None:
        served.update(_kb_retrievers(spec, spec.kb_dir))
    if spec.doc_store_root is not None:
        served.update(_page_retrievers(Path(spec.doc_store_root)))
    for name, manifest in spec.shard_sets:
        retriever = ShardedRetriever.from_manifest(manifest, spec.gpu)
        served[name] = Served(retriever, "vector", retriever.dim)
    return served


def _kb_retrievers(spec: CatalogSpec, kb_dir: str | Path) -> dict[str, Served]:
    from ragym.envs.kbvqa.kb import load_kb

    kb = load_kb(kb_dir)
    image = kb.image_retriever(IndexSpec(kind=spec.index_kind))
    if spec.gpu is not None:
        for shard in image.shards if isinstance(image, ShardedRetriever) else [image]:
            shard.index = to_gpu(shard.index, spec.gpu)
    served = {
        "image": Served(image, "vector", int(kb.entity_embeddings.shape[1])),
        "candidates": Served(kb.candidate_retriever(), "text"),
    }
    # The text retrievers the KB lists (kb.json text_retrievers), the ones KBVQA-v0 may ask for.
    served.update({kind: Served(kb.text_retriever(kind), "text") for kind in kb.text_retrievers()})
    return served


def _page_retrievers(root: Path) -> dict[str, Served]:
    from ragym.envs.docmemo.pages import PageRetriever
    from ragym.envs.docmemo.store import load_store
    from ragym.envs.retrieval.page_encoders import TextPageEncoder

    folders = sorted(p.parent for p in root.glob("*/meta.json"))
    if not folders:
        raise FileNotFoundError(f"no DocMemo document stores under {root} (no */meta.json)")
    encoder = TextPageEncoder()
    return {
        f"pages/{folder.name}": Served(PageRetriever(load_store(folder), encoder), "text")
        for folder in folders
    }
