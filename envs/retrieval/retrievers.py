"""Retrievers behind the one ``Retriever`` interface: faiss inner product, BM25, precomputed candidate lists.

All of them return ``Hit(docid, score, payload)`` lists, best first. The env pages through a ranking by
asking for ``offset + K`` hits and keeping the last ``K``, which makes paging exact (non-overlapping, no gaps)
for every implementation, because each one returns a deterministic ranking prefix.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import faiss
import numpy as np

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.search_settings import apply_search_settings, use_search_threads
from ragym.envs.retrieval.torch_flat import TorchFlatIndex

if TYPE_CHECKING:
    from ragym.envs.retrieval.service.shards import ShardedRetriever

PayloadFn = Callable[[int], dict[str, Any]]
"""Row index -> payload shown with a hit (entity name, image path, passage text...)."""


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
    apply_search_settings()
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


class DiskRefinedIndex:
    """A compressed faiss index whose candidates are re-scored exactly against full vectors on disk.

    ``base`` (say IVF-RaBitQ) proposes ``k_factor * k`` candidates per query from the codes it holds in
    memory; their full vectors are read from ``vectors``, the normalised rows in the index's row order
    (float16 or float32: a ``RefineVectors`` map of a ``.npy`` file, or any array), and the ``k`` best by
    exact inner product are returned. Memory holds only the codes; each query reads ``k_factor * k`` rows from disk (the
    page cache keeps the hot ones). Searches like a faiss index: ``search(queries, k)`` -> (scores, rows),
    rows -1 past the end.
    """

    def __init__(
        self, base: faiss.Index | TorchFlatIndex, vectors: np.ndarray | RefineVectors, k_factor: int = 4
    ):
        if vectors.ndim != 2 or vectors.shape != (base.ntotal, base.d):
            raise ValueError(
                f"refine vectors of shape {vectors.shape} for an index of {base.ntotal} x {base.d} vectors"
            )
        if k_factor < 1:
            raise ValueError(f"k_factor must be >= 1, got {k_factor}")
        self.base, self.vectors, self.k_factor = base, vectors, k_factor

    @property
    def ntotal(self) -> int:
        """Rows in the index."""
        return int(self.base.ntotal)

    @property
    def d(self) -> int:
        """Vector length."""
        return int(self.base.d)

    def search(self, queries: np.ndarray, k: int, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each (num_queries, k), best first: the base's candidates re-scored exactly."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        scores = np.full((len(queries), k), -np.finfo(np.float32).max, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        if k <= 0 or not len(queries):
            return scores, rows
        _, candidates = self.base.search(queries, min(self.ntotal, k * self.k_factor))
        for start in range(0, len(queries), chunk):
            cand = candidates[start : start + chunk]
            valid = cand >= 0
            wanted = np.unique(cand[valid])  # sorted: the disk reads go in file order
            if not len(wanted):
                continue
            full = np.asarray(self.vectors[wanted], dtype=np.float32)  # (distinct candidates, d)
            where = np.searchsorted(wanted, np.where(valid, cand, wanted[0]))
            exact = np.einsum("qd,qcd->qc", queries[start : start + chunk], full[where])
            exact[~valid] = -np.inf
            top = np.argsort(-exact, axis=1, kind="stable")[:, :k]
            got = np.take_along_axis(exact, top, axis=1)
            keep = np.isfinite(got)
            width = top.shape[1]
            scores[start : start + chunk, :width] = np.where(keep, got, scores[start : start + chunk, :width])
            rows[start : start + chunk, :width] = np.where(keep, np.take_along_axis(cand, top, axis=1), -1)
        return scores, rows


SearchIndex = faiss.Index | DiskRefinedIndex | TorchFlatIndex
"""What ``FaissRetriever`` searches, each as ``search(queries, k) -> (scores, rows)`` with ``ntotal`` and ``d``; a
``TorchFlatIndex`` is a flat index moved to a GPU (``ragym.envs.retrieval.service.shards.to_gpu``)."""


_POOL: ThreadPoolExecutor | None = None


def _reader_pool() -> ThreadPoolExecutor:
    """One process-wide pool of reader threads for ``RefineVectors`` (made on first use)."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(RefineVectors._THREADS, thread_name_prefix="refine-read")
    return _POOL


class RefineVectors:
    """The rows of a 2-D float16/float32 ``.npy`` file, memory-mapped for random reads (nothing loaded ahead).

    ``vectors[rows]`` returns the rows as an array. The map is advised ``MADV_RANDOM``: a row not in the page
    cache costs one disk read of its page or two, not the kernel's readahead window (with readahead on, a
    cold query of 60 rows read ~8 MB here and took 157 ms instead of 6); rows already cached cost a copy.
    """

    _PARALLEL_ABOVE = 256
    """Rows per request above which they are read by ``_THREADS`` threads (below, one thread is quicker)."""
    _THREADS = 8

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: the refine vectors this index needs are missing")
        with self.path.open("rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, fortran, dtype = read_header(f)
            except ValueError as error:
                raise ValueError(f"{self.path}: not a .npy file ({error})") from error
            offset = f.tell()
            if len(shape) != 2 or fortran or dtype not in (np.float16, np.float32):
                raise ValueError(
                    f"{self.path}: refine vectors must be a 2-D C-order float16/float32 array, "
                    f"got {dtype} {shape}"
                )
            self.shape, self.dtype = (int(shape[0]), int(shape[1])), np.dtype(dtype)
            size = self.shape[0] * self.shape[1] * self.dtype.itemsize
            if self.path.stat().st_size < offset + size:
                raise ValueError(
                    f"{self.path}: shorter than its header's {self.shape} rows (a partial copy?)"
                )
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if hasattr(self._map, "madvise") and hasattr(mmap, "MADV_RANDOM"):
            self._map.madvise(mmap.MADV_RANDOM)
        self._rows = np.frombuffer(
            self._map, dtype=self.dtype, count=self.shape[0] * self.shape[1], offset=offset
        ).reshape(self.shape)

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1:
            raise IndexError("refine vectors are read by a 1-D array of rows")
        if len(rows) and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"rows outside 0..{self.shape[0] - 1} of {self.path}")
        if len(rows) <= self._PARALLEL_ABOVE:
            return self._rows[rows]  # a copy: fancy indexing
        # A cold batch: several threads fault pages in at once (numpy's copy loop releases the GIL), so a disk
        # that serves parallel reads is kept busy.
        out = np.empty((len(rows), self.shape[1]), dtype=self.dtype)
        parts = np.array_split(np.arange(len(rows)), self._THREADS)

        def copy(part: np.ndarray) -> None:
            out[part] = self._rows[rows[part]]

        list(_reader_pool().map(copy, parts))
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as its path (a Ray task or a spawned worker maps the file where it runs)."""
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])


def set_search_params(index: SearchIndex, search: dict[str, int]) -> None:
    """Apply recorded search-time parameters to a loaded index: ``k_factor`` of a refine step (in faiss or
    from disk), ``nprobe`` of IVF cells, ``query_bits`` of a RaBitQ code (a faiss file keeps none of them:
    ``read_index`` gives k_factor 1, nprobe 1 and 4 query bits)."""
    unknown = set(search) - {"nprobe", "k_factor", "query_bits"}
    if unknown:
        raise ValueError(
            f"unknown search parameters {sorted(unknown)}; expected nprobe, k_factor, query_bits"
        )
    if isinstance(index, DiskRefinedIndex):
        if "k_factor" in search:
            index.k_factor = search["k_factor"]
        index = index.base
    if isinstance(index, TorchFlatIndex):
        return  # exact search on torch: no cells, codes or refine step to set
    index = faiss.downcast_index(cast(faiss.Index, index))  # a DiskRefinedIndex was unwrapped above
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

    def __init__(self, index: SearchIndex, docids: Sequence[str], payload: PayloadFn | None = None):
        if index.ntotal != len(docids):
            raise ValueError(f"index holds {index.ntotal} vectors but {len(docids)} docids were given")
        apply_search_settings()  # every index reaches search through here: built, recorded, sharded, exported
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
        queries = np.ascontiguousarray(queries, dtype=np.float32)  # (num_queries, d)
        if queries.ndim != 2 or queries.shape[1] != self.index.d:
            raise ValueError(
                f"query vectors of shape {queries.shape} for an index of {self.index.d}-d vectors"
            )
        finite = np.isfinite(queries).all(axis=1)
        if not finite.all():  # faiss ranks no row for a NaN query: an empty result that looks like a real one
            raise ValueError(f"{int((~finite).sum())} of {len(queries)} query vectors hold NaN or inf")
        use_search_threads()  # per calling thread: env workers and service threads each set their own
        return self.index.search(queries, k)

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        """Top-k hits for one query vector (dim,)."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        """Top-k hits for each query vector."""
        k = min(k, len(self.docids))
        if k <= 0:
            return [[] for _ in queries]
        scores, rows = self.raw_search(np.stack(queries), k)
        docids, payload = self.docids, self.payload
        # tolist(): Python floats and ints in one call each, not a numpy scalar per hit (the service builds
        # every hit of a 64-query batch here, holding the GIL its event loop needs)
        return [
            [Hit(docids[r], s, payload(r)) for s, r in zip(srow, rrow, strict=True) if r >= 0]
            for srow, rrow in zip(scores.tolist(), rows.tolist(), strict=True)
        ]


class EncodedRetriever:
    """A ``FaissRetriever`` (or a sharded one) whose queries are raw text (or images), encoded on the way in."""

    def __init__(
        self, retriever: FaissRetriever | ShardedRetriever, encode: Callable[[list[Any]], np.ndarray]
    ):
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
        tokenized = bm25s.tokenize(list(queries), stopwords="en", show_progress=False, return_ids=False)
        results = []
        for tokens in tokenized:
            ids = self.model.get_tokens_ids(tokens)
            if not ids:
                results.append([])
                continue
            scores = np.asarray(self.model.get_scores_from_ids(ids))
            # only documents sharing a term: the ranking's cost follows the matches, not the corpus
            matched = np.flatnonzero(scores > 0)
            rows = matched[top_k(scores[matched], k)]
            results.append([Hit(self.docids[int(r)], float(scores[r]), self.payload(int(r))) for r in rows])
        return results


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first, tied scores the later document first: one ranking on every CPU.

    bm25s's own top-k (``argpartition``, then a flipped ``argsort`` whose ties come out by whichever sort kernel the
    CPU gets: numpy's AVX-512 sort on one machine, its AVX2 one on another) ranked tied documents differently
    between machines, and every episode built on the ranking with them. Its usual order, the later document
    first (a small stable sort, flipped), is the one kept here.
    """
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
    candidates = np.flatnonzero(scores >= threshold)
    order = np.lexsort((-candidates, -scores[candidates]))
    return candidates[order[:k]]


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
