"""On-disk layout of encoded vectors: fixed-size shards with their ids, written atomically.

An encoding folder holds::

    encoding.json         what is being encoded how (encoder spec, shard and batch size); a rerun must match
    shards/00000.ids      the shard's item ids, one per line (utf-8)
    shards/00000.npy      float32 (n, dim) vectors, row i = line i of the ids file
    manifest.json         written last: counts, dimension, shard list; its presence means the run finished

A shard is finished when its ``.npy`` exists: both files are written to a temporary name and renamed, ids
first, so a killed run leaves either a finished shard or a shard that is redone from scratch. Batches never
straddle shards and every shard is cut into the same batches, so a resumed run writes the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ragym.data_prep.encoding.items import EncodingError
from ragym.envs.files import atomic_write

FORMAT = "ragym-encoded-shards"
VERSION = 1
CONFIG = "encoding.json"
MANIFEST = "manifest.json"


def shard_name(index: int) -> str:
    """``00000``-style name of shard ``index``."""
    return f"{index:05d}"


def shard_paths(root: Path, index: int) -> tuple[Path, Path]:
    """(ids file, vectors file) of shard ``index``."""
    base = root / "shards" / shard_name(index)
    return base.with_suffix(".ids"), base.with_suffix(".npy")


def write_shard(root: Path, index: int, ids: list[str], vectors: np.ndarray, durable: bool = True) -> None:
    """Write one finished shard: ids first, vectors last (the vectors file marks the shard finished)."""
    if vectors.shape[0] != len(ids):
        raise EncodingError(f"shard {shard_name(index)}: {vectors.shape[0]} vectors for {len(ids)} ids")
    if not np.isfinite(vectors).all():
        bad = [ids[i] for i in np.flatnonzero(~np.isfinite(vectors).all(axis=1))[:5]]
        raise EncodingError(f"shard {shard_name(index)}: non-finite vectors for items {bad}")
    ids_path, vec_path = shard_paths(root, index)
    ids_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(ids_path, "".join(i + "\n" for i in ids), durable=durable)
    atomic_write(
        vec_path, lambda tmp: _save_npy(tmp, np.ascontiguousarray(vectors, dtype=np.float32)), durable=durable
    )


def _save_npy(path: Path, array: np.ndarray) -> None:
    """``np.save`` to exactly ``path`` (given a name, numpy would append ``.npy`` to a temporary's)."""
    with path.open("wb") as f:
        np.save(f, array)


def is_finished(root: Path, index: int) -> bool:
    """Whether shard ``index`` was written completely."""
    return shard_paths(root, index)[1].exists()


def read_ids(root: Path, index: int) -> list[str]:
    """The ids of a finished shard."""
    return shard_paths(root, index)[0].read_text(encoding="utf-8").splitlines()


def read_vectors(root: Path, index: int, mmap: bool = True) -> np.ndarray:
    """The (n, dim) float32 vectors of a finished shard (memory-mapped by default)."""
    return np.load(shard_paths(root, index)[1], mmap_mode="r" if mmap else None)


def check_config(root: Path, config: dict[str, Any]) -> None:
    """Record ``config`` in a new folder, or check that an existing folder was written with the same one."""
    path = root / CONFIG
    record = {"format": FORMAT, "version": VERSION, **config}
    if path.exists():
        found = json.loads(path.read_text(encoding="utf-8"))
        if found != json.loads(json.dumps(record)):
            raise EncodingError(
                f"{root} holds shards encoded with another configuration ({found}); "
                f"encode into a new folder or delete it"
            )
        return
    root.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(record, indent=2, sort_keys=True), durable=True)


def write_manifest(root: Path, counts: list[int], dim: int) -> dict[str, Any]:
    """Write ``manifest.json`` once every shard is finished; returns it."""
    config = json.loads((root / CONFIG).read_text(encoding="utf-8"))
    manifest = {
        **config,
        "num_items": int(sum(counts)),
        "dim": int(dim),
        "dtype": "float32",
        "shards": [{"name": shard_name(i), "count": int(c)} for i, c in enumerate(counts)],
    }
    atomic_write(root / MANIFEST, json.dumps(manifest, indent=2), durable=True)
    return manifest


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of a finished encoding folder (a clear error for an unfinished one)."""
    path = Path(root) / MANIFEST
    if not path.exists():
        raise EncodingError(f"{root} has no {MANIFEST}: the encoding run did not finish (rerun it to resume)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise EncodingError(f"{path}: expected format {FORMAT!r} version {VERSION}")
    return manifest


def iter_shards(root: Path) -> Iterator[tuple[list[str], np.ndarray]]:
    """(ids, memory-mapped vectors) of each shard of a finished folder, in order."""
    for i, _ in enumerate(read_manifest(root)["shards"]):
        yield read_ids(root, i), read_vectors(root, i)


def load_encoded(root: Path) -> tuple[list[str], np.ndarray]:
    """All ids and the (num_items, dim) float32 vectors of a finished folder, in stream order."""
    manifest = read_manifest(root)
    ids: list[str] = []
    vectors = np.empty((manifest["num_items"], manifest["dim"]), dtype=np.float32)
    for shard_ids, shard_vectors in iter_shards(root):
        vectors[len(ids) : len(ids) + len(shard_ids)] = shard_vectors
        ids.extend(shard_ids)
    return ids, vectors
