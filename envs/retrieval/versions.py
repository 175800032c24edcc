"""Versioned query-side encoders and the retriever that swaps them atomically under load.

Retriever co-training (``ragym.rl.cotrain``) fine-tunes only the query side of a dense retriever, so the document
index stays valid: a new version is a linear map ``W`` applied to the query vector the retriever already takes
(``q -> normalise(W q)``), LoRA's low-rank delta merged into it. A version is a folder::

    encoder.npz    W, float32 (dim, dim)
    encoder.json   format, version (a string), dim, and what made it (step, recall, ...)

``VersionedRetriever`` wraps any vector retriever (faiss in process, a shard set) and reads its ``EncoderSlot``
once per call, so a batch is searched with one version whatever swaps meanwhile; every hit it returns carries
``payload["retriever_version"]``. With no encoder installed it is the wrapped retriever, hits unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ragym.envs.retrieval.hits import Hit

ENCODER_FORMAT = "ragym-query-encoder-v1"
"""Written to ``encoder.json``; bump when the layout changes."""
VERSION_KEY = "retriever_version"
"""The payload key of a hit searched through a versioned query encoder."""


@dataclass(frozen=True)
class QueryEncoder:
    """One version of the query side: ``q -> normalise(W q)``."""

    version: str
    """Name of this version (``v0003``; recorded on every hit and episode searched with it)."""
    matrix: np.ndarray
    """W, float32 (dim, dim)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What made it (step, training pairs, held-out recall), written to ``encoder.json``."""

    def __post_init__(self) -> None:
        shape = self.matrix.shape
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ValueError(f"query encoder {self.version}: W must be square, got shape {shape}")

    @property
    def dim(self) -> int:
        """Query vector length."""
        return int(self.matrix.shape[0])

    def encode(self, queries: np.ndarray) -> np.ndarray:
        """Unit-norm float32 (n, dim) query vectors from (n, dim) ones.

        >>> enc = QueryEncoder("v1", np.array([[0.0, 2.0], [1.0, 0.0]], dtype=np.float32))
        >>> enc.encode(np.array([[1.0, 0.0]], dtype=np.float32)).tolist()
        [[0.0, 1.0]]
        """
        out = np.asarray(queries, dtype=np.float32) @ self.matrix.T  # (n, dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.maximum(norms, 1e-12)).astype(np.float32)


def identity_encoder(dim: int, version: str = "v0000") -> QueryEncoder:
    """The query side as the KB encoded it (W = I)."""
    return QueryEncoder(version, np.eye(dim, dtype=np.float32), {"made_by": "identity"})


def save_query_encoder(encoder: QueryEncoder, folder: Path) -> Path:
    """Write ``encoder`` to ``folder`` whole or not at all (a reader never sees half a version)."""
    meta = {"format": ENCODER_FORMAT, "version": encoder.version, "dim": encoder.dim, **encoder.meta}
    # a temporary sibling renamed into place (this layer imports nothing above it, so not ragym.envs.files)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    tmp.mkdir(parents=True)
    try:
        np.savez(tmp / "encoder.npz", matrix=encoder.matrix.astype(np.float32))
        (tmp / "encoder.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not folder.is_dir():  # another writer published the same version first: keep theirs
            raise
    return folder


def load_query_encoder(folder: str | Path) -> QueryEncoder:
    """A version folder back; a wrong format or a missing file is an error naming the folder."""
    path = Path(folder)
    if not (path / "encoder.json").is_file():
        raise FileNotFoundError(f"{path} is no query-encoder version (no encoder.json)")
    meta = json.loads((path / "encoder.json").read_text(encoding="utf-8"))
    if meta.get("format") != ENCODER_FORMAT:
        raise ValueError(f"{path}/encoder.json: format {meta.get('format')!r}, expected {ENCODER_FORMAT!r}")
    with np.load(path / "encoder.npz") as data:
        matrix = np.asarray(data["matrix"], dtype=np.float32)
    extra = {k: v for k, v in meta.items() if k not in ("format", "version", "dim")}
    return QueryEncoder(str(meta["version"]), matrix, extra)


class EncoderSlot:
    """The query encoder in service for one index (None: queries searched as given); swapped in one assignment."""

    def __init__(self, encoder: QueryEncoder | None = None) -> None:
        self._encoder = encoder
        self._lock = threading.Lock()  # swaps are serialised; reads take the reference without it

    @property
    def current(self) -> QueryEncoder | None:
        """The encoder in service now (read once per search: the reference is swapped whole)."""
        return self._encoder

    def swap(self, encoder: QueryEncoder | None) -> QueryEncoder | None:
        """Install ``encoder`` (fully built before this call); returns the one it replaced."""
        with self._lock:
            current = self._encoder
            if encoder is not None and current is not None and encoder.dim != current.dim:
                raise ValueError(
                    f"query encoder {encoder.version} is {encoder.dim}-d, serving {current.dim}-d"
                )
            self._encoder = encoder
            return current


class VersionedRetriever:
    """A vector retriever whose queries go through the slot's encoder; hits say which version served them."""

    def __init__(self, base: Any, slot: EncoderSlot) -> None:
        self.base, self.slot = base, slot

    @property
    def version(self) -> str | None:
        """The version in service (None: no encoder installed)."""
        encoder = self.slot.current
        return None if encoder is None else encoder.version

    def swap(self, encoder: QueryEncoder | None) -> QueryEncoder | None:
        """Install ``encoder`` for every retriever sharing this slot."""
        return self.slot.swap(encoder)

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        """Top-k hits for one query vector, best first."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        """Top-k hits per query vector, the whole batch through one encoder version."""
        encoder = self.slot.current  # one read: a swap during the search changes nothing here
        if encoder is None:
            return self.base.batch_search(queries, k)
        vectors = encoder.encode(np.stack([np.asarray(q, dtype=np.float32) for q in queries]))  # (n, dim)
        results = self.base.batch_search(list(vectors), k)
        tag = {VERSION_KEY: encoder.version}
        return [[replace(h, payload={**h.payload, **tag}) for h in hits] for hits in results]

    def __getattr__(self, name: str) -> Any:
        # index facts (dim, docids, index) are the wrapped retriever's
        if name in ("base", "slot"):
            raise AttributeError(name)
        return getattr(self.base, name)
