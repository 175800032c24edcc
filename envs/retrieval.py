"""Retrievers behind the one ``Retriever`` interface: faiss inner product, BM25, precomputed candidate lists.

All of them return ``Hit(docid, score, payload)`` lists, best first. The env pages through a ranking by
asking for ``offset + K`` hits and keeping the last ``K``, which makes paging exact (non-overlapping, no gaps)
for every implementation, because each one returns a deterministic ranking prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from envs.core import Hit

PayloadFn = Callable[[int], dict[str, Any]]
"""Row index -> payload shown with a hit (entity name, image path, passage text...)."""

# faiss switches from its own SIMD loop to BLAS above this many queries; a BLAS call has a large fixed cost,
# so for the env's single-query searches the SIMD path is several times faster.
_BLAS_THRESHOLD = 20


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (float32, C-contiguous), so inner product is cosine similarity."""
    out = np.ascontiguousarray(vectors, dtype=np.float32).copy()
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    out /= np.maximum(norms, 1e-12)
    return out


@dataclass(frozen=True)
class IndexSpec:
    """Which faiss index to build over normalised vectors."""

    kind: str = "flat"
    """``flat`` (exact inner product), ``hnsw`` (graph ANN) or ``ivf`` (inverted lists, trained on the data)."""
    hnsw_m: int = 32
    """HNSW graph degree."""
    hnsw_ef_search: int = 64
    """HNSW search breadth; raise it for recall, lower it for speed."""
    ivf_lists: int = 256
    """Number of IVF cells (capped at vectors/39 so training has enough points per cell)."""
    ivf_probe: int = 16
    """IVF cells visited per query."""


def build_index(vectors: np.ndarray, spec: IndexSpec | None = None) -> faiss.Index:
    """A faiss inner-product index over ``vectors`` (already normalised), of the kind ``spec`` names."""
    spec = spec or IndexSpec()
    faiss.cvar.distance_compute_blas_threshold = _BLAS_THRESHOLD
    dim = vectors.shape[1]
    if spec.kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif spec.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, spec.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = spec.hnsw_ef_search
    elif spec.kind == "ivf":
        num_lists = max(1, min(spec.ivf_lists, len(vectors) // 39))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, num_lists, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = min(spec.ivf_probe, num_lists)
    else:
        raise ValueError(f"unknown index kind {spec.kind!r}; expected flat, hnsw or ivf")
    index.add(vectors)
    return index


def set_search_params(index: faiss.Index, search: dict[str, int]) -> None:
    """Apply recorded search-time parameters to a loaded index: ``k_factor`` of a refine step, ``nprobe`` of
    IVF cells, ``query_bits`` of a RaBitQ code (a faiss file keeps none of them: ``read_index`` gives
    k_factor 1, nprobe 1 and 4 query bits)."""
    unknown = set(search) - {"nprobe", "k_factor", "query_bits"}
    if unknown:
        raise ValueError(
            f"unknown search parameters {sorted(unknown)}; expected nprobe, k_factor, query_bits"
        )
    index = faiss.downcast_index(index)
    # wrappers nest either way round (a transform inside or outside a refine step): unwrap down to the IVF
    while isinstance(index, (faiss.IndexPreTransform, faiss.IndexRefine)):
        if isinstance(index, faiss.IndexPreTransform):
            index = faiss.downcast_index(index.index)
        else:
            if "k_factor" in search:
                index.k_factor = search["k_factor"]
            index = faiss.downcast_index(index.base_index)
    if isinstance(index, faiss.IndexIVF) and "nprobe" in search:
        index.nprobe = search["nprobe"]
    if isinstance(index, faiss.IndexIVFRaBitQ) and "query_bits" in search:
        index.qb = search["query_bits"]


class FaissRetriever:
    """Inner-product search over normalised vectors; queries are vectors (encode text/images first)."""

    def __init__(self, index: faiss.Index, docids: Sequence[str], payload: PayloadFn | None = None):
        if index.ntotal != len(docids):
            raise ValueError(f"index holds {index.ntotal} vectors but {len(docids)} docids were given")
        self.index = index
        self.docids = list(docids)
        self.payload = payload or (lambda row: {})

    @classmethod
    def from_vectors(
        cls,
        vectors: np.ndarray,
        docids: Sequence[str],
        payload: PayloadFn | None = None,
        spec: IndexSpec = IndexSpec(),
    ) -> FaissRetriever:
        """Normalise ``vectors`` and index them."""
        return cls(build_index(normalise(vectors), spec), docids, payload)

    def raw_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The bare faiss call: (scores, rows), each (num_queries, k); rows are -1 past the end."""
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        """Top-k hits for one query vector (dim,)."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        """Top-k hits for each query vector."""
        k = min(k, len(self.docids))
        if k <= 0:
            return [[] for _ in queries]
        scores, rows = self.raw_search(np.stack(queries), k)
        return [
            [
                Hit(self.docids[r], float(s), self.payload(int(r)))
                for s, r in zip(srow, rrow, strict=True)
                if r >= 0
            ]
            for srow, rrow in zip(scores, rows, strict=True)
        ]


class EncodedRetriever:
    """A ``FaissRetriever`` whose queries are raw text (or images), encoded on the way in."""

    def __init__(self, retriever: FaissRetriever, encode: Callable[[list[Any]], np.ndarray]):
        self.retriever = retriever
        self.encode = encode

    def search(self, query: Any, k: int) -> list[Hit]:
        """Top-k hits for one raw query."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        """Encode all queries in one call, then search."""
        return self.retriever.batch_search(list(normalise(self.encode(queries))), k)


class BM25Retriever:
    """Lexical BM25 search (bm25s) over a text corpus; queries are strings."""

    def __init__(self, model: Any, docids: Sequence[str], payload: PayloadFn | None = None):
        self.model = model
        self.docids = list(docids)
        self.payload = payload or (lambda row: {})

    @classmethod
    def build(
        cls, texts: Sequence[str], docids: Sequence[str], payload: PayloadFn | None = None
    ) -> BM25Retriever:
        """Tokenise and index ``texts``."""
        import bm25s

        model = bm25s.BM25()
        model.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)
        return cls(model, docids, payload)

    @classmethod
    def load(cls, path: Path, docids: Sequence[str], payload: PayloadFn | None = None) -> BM25Retriever:
        """Load an index written by ``save``."""
        import bm25s

        return cls(bm25s.BM25.load(str(path)), docids, payload)

    def save(self, path: Path) -> None:
        """Write the index to ``path`` (a folder)."""
        self.model.save(str(path))

    def search(self, query: str, k: int) -> list[Hit]:
        """Top-k hits for one query string."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-k hits per query; documents with zero score are dropped (they share no term)."""
        import bm25s

        k = min(k, len(self.docids))
        if k <= 0 or not queries:
            return [[] for _ in queries]
        tokens = bm25s.tokenize(list(queries), stopwords="en", show_progress=False)
        rows, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [
            [
                Hit(self.docids[int(r)], float(s), self.payload(int(r)))
                for r, s in zip(rrow, srow, strict=True)
                if s > 0
            ]
            for rrow, srow in zip(rows, scores, strict=True)
        ]


class CandidateListRetriever:
    """Precomputed rankings (the paper's served candidates): the query is the key of a stored list."""

    def __init__(
        self, rankings: dict[str, Sequence[str]], payload: Callable[[str], dict[str, Any]] | None = None
    ):
        self.rankings = rankings
        self.payload = payload or (lambda docid: {})

    def search(self, query: str, k: int) -> list[Hit]:
        """The first k entries of the stored ranking for ``query``; scores are minus the rank."""
        if query not in self.rankings:
            raise KeyError(f"no precomputed candidate list for query {query!r}")
        return [Hit(d, -float(rank), self.payload(d)) for rank, d in enumerate(self.rankings[query][:k])]

    def batch_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """``search`` for each key."""
        return [self.search(q, k) for q in queries]


def page(retriever: Any, query: Any, offset: int, size: int) -> list[Hit]:
    """Hits ``offset .. offset+size-1`` of the ranking for ``query`` (fewer at the end of the ranking)."""
    return retriever.search(query, offset + size)[offset:]
