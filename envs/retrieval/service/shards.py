"""An index split into shards: each shard is a faiss index file plus the docids of its rows; hits merge by score.

The shard-serving interface (what data preparation writes, what the service reads) is one JSON manifest::

    {"dim": 768, "shards": [{"index": "shard_000.faiss", "ids": "shard_000.ids.txt"}, ...]}

Paths are relative to the manifest. ``index`` is any inner-product faiss index written by
``faiss.write_index`` (flat, IVF-PQ, HNSW...); ``ids`` lists the docid of each of its rows, one per line
(``.txt``) or as a numpy array (``.npy``). An optional ``"search": {"nprobe": 32, "k_factor": 8}`` holds
the search-time parameters a faiss file does not keep; an optional per-shard ``"refine"`` names a ``.npy`` of
the shard's full vectors (row order) that re-score its candidates from disk (``ragym.envs.retrieval.retrievers.DiskRefinedIndex``); the encoding step's ``index.json``
(``ragym.data_prep.encoding.index``) is such a manifest. A query goes to every shard for its top k; ``merge_hits`` keeps
the k best by score (ties: lower shard, then shard rank), so a sharded flat index returns what one flat
index over all rows returns. In one process ``ShardedRetriever`` searches the shards in turn; on Ray each
shard is its own deployment and the ingress merges (``ragym.envs.serving.ray_serve``).
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import faiss
import numpy as np

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.retrievers import (
    DiskRefinedIndex,
    FaissRetriever,
    PayloadFn,
    RefineVectors,
    SearchIndex,
    set_search_params,
)
from ragym.envs.retrieval.torch_flat import TorchFlatIndex, is_flat_ip

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardSpec:
    """One shard on disk."""

    index_path: str
    """faiss index file (``faiss.write_index``), inner-product metric over normalised vectors."""
    ids_path: str
    """Docid of each index row: ``.txt`` one per line, or ``.npy``."""
    search: tuple[tuple[str, int], ...] = ()
    """Search-time parameters set after loading (``nprobe``, ``k_factor``), from the manifest's ``search``."""
    refine_path: str = ""
    """Full vectors (``.npy``, row order) that re-score the index's candidates from disk, or none."""
    dim: int = 0
    """The vector length the manifest states (0: not stated); ``load_shard`` checks the index against it."""


def read_manifest(path: str | Path) -> tuple[int, list[ShardSpec]]:
    """The vector dimension and the shards a manifest lists (paths resolved against its folder)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a JSON shard manifest ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("shards"), list) or not data["shards"]:
        raise ValueError(f"{path}: a shard manifest needs a non-empty 'shards' list")
    if isinstance(data.get("dim"), bool) or not isinstance(data.get("dim"), int):
        raise ValueError(f"{path}: a shard manifest needs 'dim', the vector length, got {data.get('dim')!r}")
    for shard in data["shards"]:
        if not (
            isinstance(shard, dict)
            and isinstance(shard.get("index"), str)
            and isinstance(shard.get("ids"), str)
        ):
            raise ValueError(f"{path}: each shard needs 'index' and 'ids' file names, got {shard!r}")
    search = tuple(sorted(data.get("search", {}).items()))
    specs = [
        ShardSpec(
            str(path.parent / s["index"]),
            str(path.parent / s["ids"]),
            search,
            str(path.parent / s["refine"]) if s.get("refine") else "",
            data["dim"],
        )
        for s in data["shards"]
    ]
    missing = [
        f
        for spec in specs
        for f in (spec.index_path, spec.ids_path, spec.refine_path)
        if f and not Path(f).is_file()
    ]
    if missing:
        raise FileNotFoundError(f"{path} lists {len(missing)} missing file(s): {', '.join(missing[:3])}")
    return data["dim"], specs


def write_manifest(path: str | Path, dim: int, specs: Sequence[ShardSpec]) -> Path:
    """Write a manifest for ``specs`` (stored relative to the manifest's folder)."""
    path = Path(path)
    rel = [
        {
            "index": str(Path(s.index_path).relative_to(path.parent)),
            "ids": str(Path(s.ids_path).relative_to(path.parent)),
        }
        | ({"refine": str(Path(s.refine_path).relative_to(path.parent))} if s.refine_path else {})
        for s in specs
    ]
    path.write_text(json.dumps({"dim": dim, "shards": rel}, indent=1))
    return path


def read_ids(path: str | Path) -> list[str]:
    """A shard's docids, row order."""
    path = Path(path)
    if path.suffix == ".npy":
        return [str(x) for x in np.load(path, allow_pickle=False)]
    return path.read_text(encoding="utf-8").splitlines()


def load_shard(spec: ShardSpec, gpu: int | None = None, payload: PayloadFn | None = None) -> FaissRetriever:
    """One shard as a ``FaissRetriever`` (moved to GPU ``gpu`` when given)."""
    index = faiss.read_index(spec.index_path)
    if spec.dim and index.d != spec.dim:
        # Unchecked, the shard loaded and every search then failed on the query's width, after the whole index loaded.
        raise ValueError(
            f"{spec.index_path}: an index of {index.d}-d vectors, but its manifest says dim {spec.dim}"
        )
    if spec.refine_path:
        index = DiskRefinedIndex(index, RefineVectors(spec.refine_path))
    set_search_params(index, dict(spec.search))
    if gpu is not None:
        index = to_gpu(index, gpu)
    return FaissRetriever(index, read_ids(spec.ids_path), payload)


@overload
def to_gpu(index: DiskRefinedIndex, device: int) -> DiskRefinedIndex: ...
@overload
def to_gpu(index: faiss.Index | TorchFlatIndex, device: int) -> faiss.Index | TorchFlatIndex: ...
def to_gpu(index: SearchIndex, device: int) -> SearchIndex:
    """``index`` on GPU ``device`` where it can search there; a disk refine keeps reading its vectors on the host.

    A flat inner-product index becomes exact search on torch (``TorchFlatIndex``): the GPU install's faiss is
    faiss-cpu, as PyPI's faiss GPU wheels would bring a second CUDA major (docs/index.md, "One CUDA major").
    Other kinds move with faiss's own GPU support where this faiss build has it (one built by hand for the
    install's CUDA), and otherwise stay on the CPU, logged once per index.
    """
    if isinstance(index, DiskRefinedIndex):
        return DiskRefinedIndex(to_gpu(index.base, device), index.vectors, index.k_factor)
    if isinstance(index, TorchFlatIndex):
        return index
    if is_flat_ip(index):
        return TorchFlatIndex.from_faiss(index, f"cuda:{device}")
    if isinstance(index, faiss.Index) and hasattr(faiss, "StandardGpuResources"):
        return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), device, index)
    log.warning(
        "%s of %d vectors searches on the CPU: this faiss has no GPU build (only flat inner-product "
        "indexes move to GPU %d, as exact search on torch)",
        type(index).__name__,
        index.ntotal,
        device,
    )
    return index


def merge_hits(per_shard: Sequence[list[Hit]], k: int) -> list[Hit]:
    """The k best hits over the shards' rankings (each best first); ties keep shard order, then rank."""
    ranked = ((-h.score, s, r, h) for s, hits in enumerate(per_shard) for r, h in enumerate(hits))
    return [h for *_, h in heapq.nsmallest(k, ranked, key=lambda t: t[:3])]


class ShardedRetriever:
    """Several shard retrievers answered as one index."""

    def __init__(self, shards: Sequence[FaissRetriever]):
        if not shards:
            raise ValueError("a sharded retriever needs at least one shard")
        self.shards = list(shards)

    @classmethod
    def from_manifest(cls, path: str | Path, gpu: int | None = None) -> ShardedRetriever:
        """Load every shard a manifest lists."""
        _, specs = read_manifest(path)
        return cls([load_shard(s, gpu) for s in specs])

    @property
    def dim(self) -> int:
        """Vector length of the shards."""
        return self.shards[0].index.d

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        """Top-k hits for one vector."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        """Each shard answers the whole batch; each query's hits are merged by score."""
        per_shard = [shard.batch_search(queries, k) for shard in self.shards]
        return [merge_hits([hits[i] for hits in per_shard], k) for i in range(len(queries))]


def split_into_shards(
    vectors: np.ndarray, docids: Sequence[str], num_shards: int, out_dir: str | Path
) -> Path:
    """Write ``vectors`` (normalised) as ``num_shards`` flat shards and their manifest; returns the manifest."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = []
    for i, rows in enumerate(np.array_split(np.arange(len(docids)), num_shards)):
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors[rows], dtype=np.float32))
        spec = ShardSpec(str(out_dir / f"shard_{i:03d}.faiss"), str(out_dir / f"shard_{i:03d}.ids.txt"))
        faiss.write_index(index, spec.index_path)
        Path(spec.ids_path).write_text("\n".join(docids[int(r)] for r in rows) + "\n", encoding="utf-8")
        specs.append(spec)
    return write_manifest(out_dir / "shards.json", vectors.shape[1], specs)
