"""Indexes over encoded shards, chosen by size: exact below a threshold, compressed above it, sharded.

``build_sharded_index(encoded_dir, out_dir)`` writes::

    index.json            kind, faiss factory string, counts, memory, recall@K against exact search, shards
    shard-000.faiss       one faiss index per index shard (at most ``max_shard_vectors`` vectors)
    shard-000.ids         the ids of its rows, one per line (row r of the index = line r)
    shard-000.refine.npy  with ``refine="disk"``: its rows' full vectors (float16, normalised), read per query

Below ``exact_below`` vectors the index is exact (``IndexFlatIP``, recall 1). Above it, an IVF index trained
on a sample keeps a compressed code of each vector's residual in memory (default RaBitQ, 2 bits a dimension)
and proposes ``k_factor * k`` candidates per query, which are re-ranked exactly against float16 copies of the
full vectors read from disk (``refine="disk"``; or by a finer faiss code held in memory, or not at all, with a
pre-transform optional). Its memory (the bytes of every index file: codes, ids, centroids, transforms,
in-memory refine codes), the refine vectors' bytes on disk, and its recall@K against exact top-K on a sample
of the stored vectors used as queries (the query itself excluded) are measured here and recorded.
An index too big for one machine is cut into shards that a retrieval service serves side by side.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ragym.data_prep.encoding import shards
from ragym.data_prep.encoding.items import EncodingError
from ragym.envs.files import atomic_write
from ragym.envs.retrieval.retrievers import DiskRefinedIndex, RefineVectors, normalise, set_search_params
from ragym.envs.retrieval.search_settings import apply_search_settings

log = logging.getLogger(__name__)
INDEX_FORMAT = "ragym-sharded-index"
INDEX_MANIFEST = "index.json"
PLATEAU = 0.002
"""Recall@K gained by doubling nprobe below which tuning stops (the code, not the cells, caps the recall)."""


@dataclass(frozen=True)
class IndexOptions:
    """How vectors are indexed and how the compressed index is checked."""

    exact_below: int = 200_000
    """Vectors below which the index is exact; an exact index of 200K 768-d vectors is 0.6 GB."""
    nlist: int = 0
    """IVF cells of the compressed index; 0 picks 4 * sqrt(n) rounded to a power of two (4,096 at 1M vectors,
    16,384 at 12M), so a query at nprobe 32 scans about 8 * sqrt(n) codes."""
    transform: str = ""
    """faiss pre-transform applied before the IVF (e.g. ``PCA688``: keep the top 688 principal axes), or none."""
    code: str = "RaBitQ2"
    """faiss code of each vector's residual in its IVF cell (``RaBitQ<bits>``, ``PQ<m>x<bits>``, ``SQ8``...).
    RaBitQ2 (2 bits a dimension + factors) proposes candidates for the disk refine; without a refine, RaBitQ3
    kept the most recall@15 of the codes that fit in 1/8 of the exact index on embeddings calibrated to real
    ones (``benchmarks/index_sweep.py``)."""
    refine: str = "disk"
    """What re-ranks the IVF candidates: ``disk`` (exact inner products against float16 copies of the full
    vectors, memory-mapped from ``shard-NNN.refine.npy``: nothing in memory, ``k_factor * k`` rows read per
    query), a faiss code held in memory (``SQfp16``, ``SQ8``, ``PQ<m>x8``), or ``none``."""
    nprobe: int = 0
    """IVF cells visited per query; 0 tunes it at build time: the smallest of 8, 16, 32, ... (up to every cell)
    whose recall@K on the evaluation queries reaches ``target_recall``, or, when the code caps the recall
    below it, the last before doubling stops adding ``PLATEAU`` (0.002). Real embeddings need more probes than
    synthetic ones: on MiniLM prose vectors 32 of 512 cells kept 0.90, 128 kept 0.98."""
    target_recall: float = 0.95
    """The recall@K the tuned ``nprobe`` must reach on the evaluation queries."""
    k_factor: int = 4
    """Candidates re-ranked per requested hit (with a refine step)."""
    query_bits: int = 8
    """Bits of each query coordinate when a RaBitQ code is scanned (faiss's default is 4)."""
    train_size: int = 0
    """Vectors sampled to train the IVF centroids and codes; 0 picks max(65,536, 39 per IVF cell), the
    points per centroid faiss asks for. A size given here also caps the cells at train_size / 39."""
    recall_k: int = 15
    """K of the recall@K recorded against exact search (the paper's candidate list length)."""
    num_eval_queries: int = 500
    """Stored vectors used as queries for the recall measurement."""
    max_shard_vectors: int = 50_000_000
    """Vectors per index shard (one machine's share)."""
    seed: int = 0
    """Seed of the training and evaluation samples."""

    def __post_init__(self) -> None:
        small = {
            name: getattr(self, name)
            for name in ("k_factor", "recall_k", "num_eval_queries", "max_shard_vectors")
            if getattr(self, name) < 1
        }
        small |= {
            name: getattr(self, name) for name in ("nlist", "train_size", "nprobe") if getattr(self, name) < 0
        }
        if small:
            raise EncodingError(f"index options must be >= 1 (nlist, train_size, nprobe: >= 0): {small}")
        if not 0 < self.target_recall <= 1:
            raise EncodingError(f"target_recall must be in (0, 1], got {self.target_recall}")
        if self.query_bits not in range(1, 9):
            raise EncodingError(
                f"query_bits must be 1..8 (bits of a RaBitQ query coordinate), got {self.query_bits}"
            )
        if self.refine.lower() == "disk" and self.refine != "disk":
            raise EncodingError(f"refine {self.refine!r}: the disk refine is spelt 'disk'")

    def factory(self, num_vectors: int) -> str:
        """The faiss ``index_factory`` string for ``num_vectors`` vectors."""
        if num_vectors < self.exact_below:
            return "Flat"
        nlist = self.cells(num_vectors)
        refine = "" if self.refine in ("none", "disk") else f",Refine({self.refine})"
        transform = f"{self.transform}," if self.transform else ""
        return f"{transform}IVF{nlist},{self.code}{refine}"

    def cells(self, num_vectors: int) -> int:
        """IVF cells for ``num_vectors`` vectors: ``nlist``, or 4 * sqrt(n) as a power of two; at most one per 39
        training vectors."""
        nlist = self.nlist or int(2 ** round(np.log2(4 * np.sqrt(num_vectors))))
        limit = (self.train_size or num_vectors) // 39
        return max(1, min(nlist, limit))

    def training_vectors(self, num_vectors: int) -> int:
        """How many of ``num_vectors`` vectors train the compressed index."""
        size = self.train_size or max(65_536, 39 * self.cells(num_vectors))
        return min(num_vectors, size)

    def search(self, nprobe: int | None = None) -> dict[str, int]:
        """Search-time parameters a faiss file does not keep (``ragym.envs.retrieval.retrievers.set_search_params``)."""
        return {
            "nprobe": nprobe or self.nprobe or 8,
            "k_factor": self.k_factor,
            "query_bits": self.query_bits,
        }

    def nprobes(self, cells: int) -> list[int]:
        """The nprobe values tried, smallest first: ``nprobe`` alone, or 8, 16, 32, ... and every cell."""
        if self.nprobe:
            return [self.nprobe]
        tried = [p for p in (2**i for i in range(3, 30)) if p < cells]
        return [*tried, cells]


@dataclass(frozen=True)
class VectorBlocks:
    """The vectors an index is built from, block by block: the shards of a finished encoding run
    (``from_encoded``, memory-mapped), or an array a prep already holds (``from_array``: say vectors it adjusted
    after encoding). ``read(i)`` gives block ``i``'s ids and float32 vectors."""

    counts: tuple[int, ...]
    dim: int
    read: Callable[[int], tuple[list[str], np.ndarray]]

    @classmethod
    def from_encoded(cls, root: Path) -> VectorBlocks:
        manifest = shards.read_manifest(root)
        counts = tuple(int(s["count"]) for s in manifest["shards"])
        return cls(
            counts, int(manifest["dim"]), lambda i: (shards.read_ids(root, i), shards.read_vectors(root, i))
        )

    @classmethod
    def from_array(cls, ids: Sequence[str], vectors: np.ndarray, block: int = 65_536) -> VectorBlocks:
        if vectors.ndim != 2 or len(ids) != len(vectors):
            raise EncodingError(f"{len(ids)} ids for vectors of shape {vectors.shape}")
        starts = range(0, len(ids), block)
        counts = tuple(min(block, len(ids) - start) for start in starts)
        return cls(
            counts,
            int(vectors.shape[1]),
            lambda i: (list(ids[i * block : (i + 1) * block]), vectors[i * block : (i + 1) * block]),
        )

    @property
    def num(self) -> int:
        return sum(self.counts)

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, normalised float32 vectors) per block."""
        start = 0
        for i, count in enumerate(self.counts):
            yield start, normalise(self.read(i)[1])
            start += count

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The normalised vectors at sorted global ``rows`` (block by block)."""
        out, start = [], 0
        for i, count in enumerate(self.counts):
            local = rows[(rows >= start) & (rows < start + count)] - start
            if len(local):
                out.append(np.asarray(self.read(i)[1][local]))
            start += count
        return normalise(np.concatenate(out))


def _shard_plan(counts: list[int], max_vectors: int) -> list[list[int]]:
    """Encoded shards grouped into index shards of at most ``max_vectors`` (an oversized one stands alone)."""
    plan: list[list[int]] = [[]]
    size = 0
    for index, count in enumerate(counts):
        if plan[-1] and size + count > max_vectors:
            plan.append([])
            size = 0
        plan[-1].append(index)
        size += count
    return plan


def _add_members(
    index: faiss.Index, source: VectorBlocks, members: list[int], refine: Path | None = None
) -> list[str]:
    """Add the members' normalised vectors to ``index`` and, with ``refine``, as float16 to a ``.npy`` there
    (the shard's full vectors for disk refinement); returns their ids in index order."""
    rows = sum(source.counts[m] for m in members)
    array = (
        None if refine is None else np.lib.format.open_memmap(refine, "w+", np.float16, (rows, source.dim))
    )
    ids: list[str] = []
    for member in members:
        block_ids, block = source.read(member)
        vectors = normalise(block)
        index.add(vectors)
        if array is not None:
            array[len(ids) : len(ids) + len(vectors)] = vectors
        ids.extend(block_ids)
    if len(ids) != rows:
        raise RuntimeError(f"{refine or 'index shard'}: read {len(ids)} of {rows} vectors")
    if array is not None:
        array.flush()
    return ids


def _configure(index: faiss.Index | DiskRefinedIndex, options: IndexOptions) -> None:
    """Search-time parameters (nprobe, k_factor) of a compressed index; flat indexes have none."""
    set_search_params(index, options.search())


def no_polysemous_training(index: faiss.Index) -> None:
    """Turn off faiss's polysemous training of every PQ code in ``index``.

    faiss trains PQ codes for Hamming-distance pre-filtering by simulated annealing unless told not to: at
    256 sub-quantizers that alone ran for over ten minutes on 65K training vectors, and ragym never searches
    with a Hamming threshold, so it buys nothing.
    """
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        no_polysemous_training(index.index)
    elif isinstance(index, faiss.IndexRefine):
        no_polysemous_training(index.base_index)
        no_polysemous_training(index.refine_index)
    elif isinstance(index, (faiss.IndexPQ, faiss.IndexIVFPQ)):
        # A property of faiss's SWIG classes that pyright's reading of the SWIG module does not show.
        index.do_polysemous_training = False  # pyright: ignore[reportAttributeAccessIssue]


def _train(source: VectorBlocks, factory: str, options: IndexOptions) -> faiss.Index:
    num, dim = source.num, source.dim
    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:  # faiss's message is a C++ trace; name the options that made the string
        raise EncodingError(
            f"faiss cannot build {factory!r} for {dim}-d vectors (transform {options.transform!r}, code "
            f"{options.code!r}, refine {options.refine!r}): {str(error).strip().splitlines()[-1]}"
        ) from None
    no_polysemous_training(index)
    if not index.is_trained:
        rng = np.random.default_rng(options.seed)
        sample = np.sort(rng.choice(num, size=options.training_vectors(num), replace=False))
        start = time.perf_counter()
        index.train(source.rows(sample))
        log.info("trained %s on %d vectors in %.1fs", factory, len(sample), time.perf_counter() - start)
    return index


def build_sharded_index(encoded: Path, out: Path, options: IndexOptions = IndexOptions()) -> dict[str, Any]:
    """Index the vectors of a finished encoding folder under ``out``; returns the written ``index.json``."""
    return index_vectors(VectorBlocks.from_encoded(Path(encoded)), out, options)


def index_vectors(source: VectorBlocks, out: Path, options: IndexOptions = IndexOptions()) -> dict[str, Any]:
    """Index ``source``'s vectors under ``out`` (see ``build_sharded_index``); returns the written ``index.json``."""
    out = Path(out)
    num, dim = source.num, source.dim
    factory = options.factory(num)
    template = _train(source, factory, options)
    out.mkdir(parents=True, exist_ok=True)
    plan = _shard_plan(list(source.counts), options.max_shard_vectors)
    disk_refine = options.refine == "disk" and factory != "Flat"
    records, indexes, offset = [], [], 0
    for number, members in enumerate(plan):
        index = faiss.clone_index(template)
        name = f"shard-{number:03d}"
        record = {"index": f"{name}.faiss", "ids": f"{name}.ids", "offset": offset}
        refine = f"{name}.refine.npy"
        if disk_refine:  # written under a temporary name: a killed build leaves no half refine file
            ids = atomic_write(out / refine, partial(_add_members, index, source, members))
        else:
            ids = _add_members(index, source, members)
        atomic_write(out / f"{name}.ids", "".join(i + "\n" for i in ids))
        atomic_write(out / f"{name}.faiss", faiss.serialize_index(index).tobytes())
        if disk_refine:
            record["refine"] = refine
            index = DiskRefinedIndex(index, RefineVectors(out / record["refine"]))
        _configure(index, options)
        indexes.append((offset, index))
        records.append(record | {"count": len(ids)})
        offset += len(ids)
    memory = sum((out / r["index"]).stat().st_size for r in records)
    disk = sum((out / r["refine"]).stat().st_size for r in records if "refine" in r)
    quality: dict[str, Any] = {"recall": 1.0}
    if factory != "Flat":
        quality = measure_recall(source, indexes, options, options.nprobes(options.cells(num)))
    result = {
        "format": INDEX_FORMAT,
        "kind": "exact" if factory == "Flat" else "compressed",
        "factory": factory,
        "search": options.search(quality.get("nprobe")) if factory != "Flat" else {},
        "num_vectors": num,
        "dim": dim,
        "memory_bytes": memory,
        "exact_memory_bytes": num * dim * 4,
        "memory_ratio": memory / (num * dim * 4),
        "refine": "disk" if disk_refine else ("none" if factory == "Flat" else options.refine),
        "trained_on": 0 if factory == "Flat" else options.training_vectors(num),
        "refine_disk_bytes": disk,
        "refine_disk_ratio": disk / (num * dim * 4),
        f"recall@{options.recall_k}": quality["recall"],
        "recall_eval": {k: v for k, v in quality.items() if k != "recall"},
        "options": asdict(options),
        "shards": records,
    }
    atomic_write(out / INDEX_MANIFEST, json.dumps(result, indent=2))
    log.info(
        "%s index over %d vectors: %.3f of exact memory, recall@%d %.3f",
        result["kind"],
        num,
        result["memory_ratio"],
        options.recall_k,
        quality["recall"],
    )
    return result


def _top(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the ``k`` best (scores, rows) of (Q, n) candidates, best first."""
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    top_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-top_scores, axis=1, kind="stable")
    return np.take_along_axis(top_scores, order, axis=1), np.take_along_axis(
        rows, np.take_along_axis(part, order, axis=1), axis=1
    )


def exact_top(source: VectorBlocks, queries: np.ndarray, k: int) -> np.ndarray:
    """Global rows of the exact inner-product top-``k`` of each query, streaming over the blocks."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for start, block in source.blocks():
        scores = queries @ block.T  # (Q, block)
        rows = np.broadcast_to(np.arange(start, start + len(block)), scores.shape)
        best_scores, best_rows = _top(np.hstack([best_scores, scores]), np.hstack([best_rows, rows]), k)
    return best_rows


def search_shards(
    indexes: list[tuple[int, faiss.Index | DiskRefinedIndex]], queries: np.ndarray, k: int
) -> np.ndarray:
    """Global rows of the merged top-``k`` over index shards ((offset, index) pairs); -1 where none."""
    scores, rows = [], []
    for offset, index in indexes:
        s, r = index.search(queries, k)
        scores.append(np.where(r >= 0, s, -np.inf))
        rows.append(np.where(r >= 0, r + offset, -1))
    return _top(np.hstack(scores), np.hstack(rows), k)[1]


def measure_recall(
    source: VectorBlocks,
    indexes: list[tuple[int, faiss.Index | DiskRefinedIndex]],
    options: IndexOptions,
    nprobes: Sequence[int] = (),
) -> dict:
    """Recall@K of the sharded index against exact search, stored vectors as queries (themselves excluded).

    With ``nprobes``, each is set in turn (smallest first) until the recall reaches ``options.target_recall``
    or stops rising (by under ``PLATEAU``: the code, not the cells, caps it; the smaller one is kept); the
    indexes are left at the one kept, which the result names with every recall tried."""
    rng = np.random.default_rng(options.seed + 1)
    num = source.num
    rows = np.sort(rng.choice(num, size=min(num, options.num_eval_queries), replace=False))
    queries = source.rows(rows)
    k = options.recall_k
    start = time.perf_counter()
    truth = exact_top(source, queries, k + 1)

    def recall() -> float:
        approx = search_shards(indexes, queries, k + 1)
        hits = []
        for row, t, a in zip(rows, truth, approx, strict=True):
            t_set = [r for r in t if r != row][:k]
            a_set = [r for r in a if r != row and r >= 0][:k]
            hits.append(len(set(t_set) & set(a_set)) / len(t_set))
        return float(np.mean(hits))

    result: dict[str, Any] = {}
    if not nprobes:
        result["recall"] = recall()
    else:
        tried: dict[str, float] = {}
        kept = nprobes[0]
        for nprobe in nprobes:
            for _, index in indexes:
                set_search_params(index, {"nprobe": nprobe})
            tried[str(nprobe)] = recall()
            if len(tried) > 1 and tried[str(nprobe)] - tried[str(kept)] < PLATEAU:
                for _, index in indexes:
                    set_search_params(index, {"nprobe": kept})
                log.warning(
                    "recall@%d stopped rising at %.3f (nprobe %d), below the target %.3f: the code caps "
                    "it (a refine step lifts it)",
                    k,
                    tried[str(kept)],
                    kept,
                    options.target_recall,
                )
                break
            kept = nprobe
            if tried[str(nprobe)] >= options.target_recall:
                break
        result = {"recall": tried[str(kept)], "nprobe": kept, "nprobe_tried": tried}
    seconds = round(time.perf_counter() - start, 1)
    return result | {"num_queries": len(rows), "k": k, "seconds": seconds}


def load_sharded_index(
    out: Path,
) -> tuple[dict[str, Any], list[tuple[int, faiss.Index | DiskRefinedIndex]], list[str]]:
    """(manifest, (offset, index) per shard with its search parameters set, all ids in row order)."""
    out = Path(out)
    manifest = json.loads((out / INDEX_MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("format") != INDEX_FORMAT:
        raise ValueError(f"{out / INDEX_MANIFEST}: expected format {INDEX_FORMAT!r}")
    apply_search_settings()
    indexes, ids = [], []
    for record in manifest["shards"]:
        index = faiss.read_index(str(out / record["index"]))
        if record.get("refine"):
            index = DiskRefinedIndex(index, RefineVectors(out / record["refine"]))
        set_search_params(index, manifest["search"])
        indexes.append((record["offset"], index))
        ids.extend((out / record["ids"]).read_text(encoding="utf-8").splitlines())
    return manifest, indexes, ids


def index_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The part of ``index.json`` a KB manifest records: kind, factory, sizes, memory, recall."""
    keep = ("kind", "factory", "num_vectors", "memory_bytes", "exact_memory_bytes", "memory_ratio")
    keep += tuple(k for k in ("refine", "refine_disk_bytes") if k in manifest)
    recall = {k: v for k, v in manifest.items() if k.startswith("recall@")}
    return {k: manifest[k] for k in keep} | recall | {"num_shards": len(manifest["shards"])}
