"""Versioned retrievers: a query-side map, optionally a document side's changed rows, swapped atomically under load.

Retriever co-training (``ragym.rl.cotrain``) fine-tunes the query side of a dense retriever: a new version is a
linear map ``W`` applied to the query vector the retriever already takes (``q -> normalise(W q)``), LoRA's low-rank
delta merged into it. With a document-side update it also carries the entity vectors it changed (``DocumentRows``):
serving it re-writes only those rows of the index (``ragym.envs.retrieval.index_rows``). A version is a folder::

    encoder.npz     W, float32 (dim, dim)
    documents.npz   ids (the changed entities), vectors, float32 unit-norm (len(ids), dim); only with a
                    document side. Cumulative: every row the version's chain changed, relative to the KB's own
                    vectors, so one version alone says what the index serves (a row it lacks is the KB's)
    encoder.json    format, version (a string), dim, num_document_rows, and what made it (step, recall, ...)

``VersionedRetriever`` wraps any vector retriever (faiss in process, a shard set) and reads its ``EncoderSlot``
once per call, so a batch is searched with one whole version (its map and its rows) whatever swaps meanwhile;
every hit it returns carries ``payload["retriever_version"]``. With no encoder installed it is the wrapped
retriever, hits unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.index_rows import IndexRows, refusal

ENCODER_FORMAT = "ragym-query-encoder-v2"
"""Written to ``encoder.json``; bump when the layout changes (v2 added ``documents.npz``)."""
READ_FORMATS = ("ragym-query-encoder-v1", ENCODER_FORMAT)
"""Formats ``load_query_encoder`` reads (a v1 folder is a query map alone)."""
VERSION_KEY = "retriever_version"
"""The payload key of a hit searched through a versioned query encoder."""


@dataclass(frozen=True)
class DocumentRows:
    """The entity vectors a version serves in place of the KB's own: every row its chain of versions changed."""

    ids: tuple[str, ...]
    """The changed entities, distinct."""
    vectors: np.ndarray
    """Their vectors, float32 unit-norm (len(ids), dim)."""

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or self.vectors.shape[0] != len(self.ids):
            raise ValueError(f"{len(self.ids)} document ids with vectors of shape {self.vectors.shape}")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("document rows name an entity twice")
        if not np.isfinite(self.vectors).all():
            raise ValueError("document rows hold non-finite vectors (a diverged round?)")

    def applied_to(self, vectors: np.ndarray, row_of: Mapping[str, int]) -> np.ndarray:
        """A float32 copy of ``vectors`` (the KB's own, in ``row_of``'s row order) with these rows replaced.

        >>> rows = DocumentRows(("b",), np.array([[0.0, 1.0]], dtype=np.float32))
        >>> rows.applied_to(np.eye(2, dtype=np.float32)[[0, 0]], {"a": 0, "b": 1}).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        out = np.array(vectors, dtype=np.float32)  # (num_entities, dim)
        out[[row_of[i] for i in self.ids]] = self.vectors
        return out


@dataclass(frozen=True)
class QueryEncoder:
    """One retriever version: the query side ``q -> normalise(W q)`` and the document rows it changed, if any."""

    version: str
    """Name of this version (``v0003``; recorded on every hit and episode searched with it)."""
    matrix: np.ndarray
    """W, float32 (dim, dim)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What made it (step, training pairs, held-out recall), written to ``encoder.json``."""
    documents: DocumentRows | None = None
    """The entity rows it serves in place of the KB's (a document-side update); None: the KB's own throughout."""

    def __post_init__(self) -> None:
        shape = self.matrix.shape
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ValueError(f"query encoder {self.version}: W must be square, got shape {shape}")
        # A diverged round's NaN W loaded and swapped in: every query it encoded was then refused at search.
        if not np.isfinite(self.matrix).all():
            raise ValueError(f"query encoder {self.version}: W holds non-finite values (a diverged round?)")
        if self.documents is not None and self.documents.vectors.shape[1] != shape[0]:
            raise ValueError(
                f"query encoder {self.version}: {self.documents.vectors.shape[1]}-d document rows, {shape[0]}-d W"
            )

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
    rows = encoder.documents
    meta = {
        "format": ENCODER_FORMAT,
        "version": encoder.version,
        "dim": encoder.dim,
        "num_document_rows": 0 if rows is None else len(rows.ids),
        **encoder.meta,
    }
    # a temporary sibling renamed into place (this layer imports nothing above it, so not ragym.envs.files)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    tmp.mkdir(parents=True)
    try:
        np.savez(tmp / "encoder.npz", matrix=encoder.matrix.astype(np.float32))
        if rows is not None:
            np.savez(tmp / "documents.npz", ids=np.array(rows.ids, dtype=str), vectors=rows.vectors)
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
    if meta.get("format") not in READ_FORMATS:
        raise ValueError(
            f"{path}/encoder.json: format {meta.get('format')!r}, expected one of {READ_FORMATS}"
        )
    with np.load(path / "encoder.npz") as data:
        matrix = np.asarray(data["matrix"], dtype=np.float32)
    documents = None
    if meta.get("num_document_rows"):
        with np.load(path / "documents.npz") as data:
            ids = tuple(str(i) for i in data["ids"])
            documents = DocumentRows(ids, np.asarray(data["vectors"], dtype=np.float32))
        if len(documents.ids) != meta["num_document_rows"]:
            raise ValueError(
                f"{path}: {len(documents.ids)} document rows, encoder.json says {meta['num_document_rows']}"
            )
    extra = {k: v for k, v in meta.items() if k not in ("format", "version", "dim", "num_document_rows")}
    return QueryEncoder(str(meta["version"]), matrix, extra, documents)


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


class _Gate:
    """Many searches at once, or one write of index rows alone; a waiting write holds new searches back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = self._waiting = 0
        self._writing = False

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._writing or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class VersionedRetriever:
    """A vector retriever whose queries go through the slot's encoder, and whose index holds that version's
    document rows while it searches; hits say which version served them."""

    def __init__(self, base: Any, slot: EncoderSlot) -> None:
        self.base, self.slot = base, slot
        self._gate = _Gate()
        self._rows: IndexRows | None = None  # made when a version with document rows first comes
        self._applied: DocumentRows | None = None  # the rows the index serves now (None: the KB's own)

    @property
    def version(self) -> str | None:
        """The version in service (None: no encoder installed)."""
        encoder = self.slot.current
        return None if encoder is None else encoder.version

    def swap(self, encoder: QueryEncoder | None) -> QueryEncoder | None:
        """Install ``encoder`` for every retriever sharing this slot (its document rows written into this index
        now, into the others' at their next search)."""
        self.check(encoder)
        previous = self.slot.swap(encoder)
        self._sync()
        return previous

    @property
    def row_refusal(self) -> str | None:
        """Why this index cannot serve a version's document rows (None: it can; ``/ready`` reports it)."""
        return refusal(self.base)

    def check(self, encoder: QueryEncoder | None) -> None:
        """Raise ``ValueError`` (one line) when this index cannot serve ``encoder``'s document rows."""
        if encoder is None or encoder.documents is None:
            return
        missing = self._index_rows().unknown(encoder.documents.ids)
        if missing:
            raise ValueError(
                f"version {encoder.version}: {len(missing)} document rows name no entity of the index: {missing[:3]}"
            )

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        """Top-k hits for one query vector, best first."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        """Top-k hits per query vector, the whole batch through one version (its map and its document rows)."""
        while True:
            encoder = self.slot.current  # one read: a swap during the search changes nothing here
            with self._gate.reading():  # the rows cannot change while it searches
                if _rows_of(encoder) is self._applied:
                    return self._search(encoder, queries, k)
            self._sync()  # another retriever on this slot swapped a version whose rows this index lacks

    def _search(self, encoder: QueryEncoder | None, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        if encoder is None:
            return self.base.batch_search(queries, k)
        vectors = encoder.encode(np.stack([np.asarray(q, dtype=np.float32) for q in queries]))  # (n, dim)
        results = self.base.batch_search(list(vectors), k)
        tag = {VERSION_KEY: encoder.version}
        return [[replace(h, payload={**h.payload, **tag}) for h in hits] for hits in results]

    def _sync(self) -> None:
        """Write the slot's version's document rows into the index (and the KB's back where it has none)."""
        with self._gate.writing():
            encoder = self.slot.current
            target = _rows_of(encoder)
            if target is self._applied:
                return
            rows = self._index_rows()
            if self._applied is not None:
                kept = set() if target is None else set(target.ids)
                rows.write([i for i in self._applied.ids if i not in kept], None)
            if target is not None:
                rows.write(target.ids, target.vectors)
            self._applied = target

    def _index_rows(self) -> IndexRows:
        if self._rows is None:
            self._rows = IndexRows(self.base)  # refuses an index that cannot replace rows
        return self._rows

    def __getattr__(self, name: str) -> Any:
        # index facts (dim, docids, index) are the wrapped retriever's
        if name in ("base", "slot", "_gate", "_rows", "_applied", "row_refusal"):
            raise AttributeError(name)
        return getattr(self.base, name)


def _rows_of(encoder: QueryEncoder | None) -> DocumentRows | None:
    return None if encoder is None else encoder.documents
