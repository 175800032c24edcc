"""The on-disk KB-VQA knowledge base format and its loader (cached per path, so envs are cheap to build).

A KB folder holds (paths relative to it)::

    kb.json                      manifest: format version, encoders, counts, free-form ``extra``
    entities.parquet             entity_id, name, image (relative path), signature (str or null)
    passages.parquet             passage_id, entity_id, title, text (<= 800-character chunks)
    queries.parquet              query_id, image (relative path), signature, candidates (ranked entity ids)
    index/entity_embeddings.npy  float32 (num_entities, d), L2-normalised, row i = entities row i
    index/query_embeddings.npy   float32 (num_queries, d), row i = queries row i
    index/passage_embeddings.npy optional dense passage vectors (when the manifest names a text encoder)
    index/entities/index.json    optional: the index the encoding step built over the entity vectors
                                 (exact or compressed, maybe sharded), recorded in kb.json's ``index.entities``
    index/bm25/                  bm25s index over passages (row i = passages row i)
    index/images.u8 (+ _index)   optional decoded entity images (``ragym.envs.image_pack``), read by memory map
    images/ queries/             image files
    data/<split>.parquet         dataset rows in verl's schema

``signature`` is the visual-signature code the demo shows in place of what a VLM would see (null in real
KBs). ``candidates`` is the paper's precomputed candidate list for each query image.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ragym.envs.image_budget import ImageBudget
from ragym.envs.image_cache import cached_fit, read_image
from ragym.envs.image_pack import PACK_INDEX, ImagePack
from ragym.envs.retrieval.retrievers import (
    BM25Retriever,
    CandidateListRetriever,
    EncodedRetriever,
    FaissRetriever,
    IndexSpec,
)
from ragym.envs.retrieval.service.shards import ShardedRetriever, load_shard, read_manifest
from ragym.envs.retrieval.versions import EncoderSlot, VersionedRetriever

log = logging.getLogger(__name__)

DEFAULT_SPEC = IndexSpec(kind="auto")
BUILT_KINDS = ("auto", "built")
"""Index kinds a KB resolves itself: ``built`` loads the index recorded in kb.json's ``index.entities``
(an error when none is), ``auto`` loads it when recorded and else builds ``flat`` over the embeddings."""
KB_FORMAT = "ragym-kbvqa-kb"
KB_VERSION = 1
MANIFEST = "kb.json"
REQUIRED_FILES = (
    "kb.json",
    "entities.parquet",
    "passages.parquet",
    "queries.parquet",
    "index/entity_embeddings.npy",
)
TEXT_RETRIEVERS = ("bm25", "dense")
"""Text retrievers a KB can serve: BM25 (always built) and dense passage vectors (with a text encoder)."""


@dataclass
class KnowledgeBase:
    """A loaded KB: tables, embeddings, and lazily built retrievers (shared by every env on this path)."""

    root: Path
    manifest: dict[str, Any]
    entities: pd.DataFrame
    passages: pd.DataFrame
    queries: pd.DataFrame
    entity_embeddings: np.ndarray
    query_embeddings: np.ndarray | None
    entity_row: dict[str, int] = field(init=False)
    query_row: dict[str, int] = field(init=False)
    _retrievers: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)
    query_slot: EncoderSlot = field(default_factory=EncoderSlot, init=False, repr=False)
    """The query-side encoder live image search applies (``ragym.envs.retrieval.versions``; empty: queries as
    encoded); retriever co-training swaps it, and every env and service on this KB in the process sees the swap."""

    def __post_init__(self) -> None:
        self.entity_row = {e: i for i, e in enumerate(self.entities["entity_id"])}
        # an id on two rows: the later row would shadow the earlier one's image and its gold label
        if len(self.entity_row) != len(self.entities):
            ids = self.entities["entity_id"]
            twice = sorted(set(ids[ids.duplicated()]))
            raise ValueError(
                f"{self.root / 'entities.parquet'}: {len(twice)} entity ids name two rows: {twice[:3]}"
            )
        # Keyed by the symlink-free path: a row may name an image through a symlinked folder or its target.
        self.query_row = {self.resolve(p): i for i, p in enumerate(self.queries["image"])}
        self._names = self.entities["name"].tolist()
        self._images = self.entities["image"].tolist()
        # entity_payload joins by concatenation: pathlib per hit cost a tenth of the service's time under load,
        # os.path.join a few percent; an absolute image path stays as it is, as with os.path.join
        self._root_prefix = os.path.join(str(self.root), "")
        self._signatures = self.entities["signature"].tolist()
        self._titles = self.passages["title"].tolist()
        self._texts = self.passages["text"].tolist()
        self._passage_entities = self.passages["entity_id"].tolist()
        width = self.entity_embeddings.shape[1]
        if self.query_embeddings is not None and self.query_embeddings.shape != (len(self.queries), width):
            raise ValueError(
                f"{self.root / 'index' / 'query_embeddings.npy'} holds {self.query_embeddings.shape} vectors for "
                f"{len(self.queries)} queries and {width}-d entity vectors: re-encode the KB's queries"
            )
        self.image_pack = ImagePack.load(self.root)
        if self.image_pack is not None and len(self.image_pack) != len(self.entities):
            raise ValueError(
                f"{self.root / PACK_INDEX} holds {len(self.image_pack)} images for {len(self.entities)} "
                "entities: rebuild it with `ragym prep image-pack`"
            )

    def entity_payload(self, row: int) -> dict[str, Any]:
        """What a candidate shows: name, absolute image path, visual signature."""
        return {
            "name": self._names[row],
            "image": image if (image := self._images[row]).startswith("/") else self._root_prefix + image,
            "signature": self._signatures[row],
        }

    def passage_payload(self, row: int) -> dict[str, Any]:
        """What a passage hit shows: its title and text."""
        return {
            "title": self._titles[row],
            "text": self._texts[row],
            "entity_id": self._passage_entities[row],
        }

    def entity_image(self, entity_id: str, path: str, budget: ImageBudget | None = None) -> np.ndarray:
        """An entity's image, uint8 (H, W, 3) read-only, fitted to ``budget``'s candidate pixels: from the
        image pack when the KB has one (no decode; no resize when the pack was written to the budget), else
        decoded from ``path`` (cached per process)."""
        if self.image_pack is None:
            return read_image(path, budget, "candidate")
        row = self.entity_row[entity_id]
        packed = self.image_pack.image(row)
        height, width = packed.shape[:2]
        if budget is None or not budget.needs_resize(height, width, "candidate"):
            # A pack written within the budget (`ragym prep image-pack --max-side 448` for 256 tokens at factor 28:
            # 16 x 16 blocks at most) is served without a resize.
            return packed
        key = (str(self.root / PACK_INDEX), row, budget)
        return cached_fit(key, packed, budget, "candidate")

    def resolve(self, path: str) -> str:
        """The absolute, symlink-free form of a path given relative to the KB folder or absolute."""
        return str((self.root / path).resolve())  # an absolute ``path`` replaces ``root`` here

    def query_index(self, image_path: str) -> int | None:
        """Row of a query image in ``queries.parquet`` (relative to the KB or absolute), or None if unknown."""
        return self.query_row.get(self.resolve(image_path))

    def image_retriever(self, spec: IndexSpec = DEFAULT_SPEC) -> FaissRetriever | ShardedRetriever:
        """Live faiss search over entity embeddings: the recorded index (kinds ``auto``, ``built``) or one
        built here over ``entity_embeddings.npy`` (``flat``, ``hnsw``, ``ivf``); once per index spec."""
        key = ("image", spec)
        if key not in self._retrievers:
            record = self.manifest.get("index", {}).get("entities")
            if spec.kind == "built" and record is None:
                raise ValueError(f"{self.root / MANIFEST} records no entity index (index.entities)")
            if spec.kind in BUILT_KINDS and record is not None:
                self._retrievers[key] = self._built_retriever(self.root / record["path"] / "index.json")
            else:
                build = IndexSpec(**{**spec.__dict__, "kind": "flat"}) if spec.kind == "auto" else spec
                self._retrievers[key] = FaissRetriever.from_vectors(
                    self.entity_embeddings, self.entities["entity_id"].tolist(), self.entity_payload, build
                )
        return self._retrievers[key]

    def versioned_image(self, spec: IndexSpec = DEFAULT_SPEC) -> VersionedRetriever:
        """``image_retriever(spec)`` behind the KB's query encoder slot: what envs and ``ragym serve`` search. A
        version with document rows (co-training's ``update_documents``) is written into that same index, so a
        search of the bare ``image_retriever(spec)`` meets its rows too (with the KB's own query side)."""
        key = ("versioned", spec)
        if key not in self._retrievers:
            self._retrievers[key] = VersionedRetriever(self.image_retriever(spec), self.query_slot)
        return self._retrievers[key]

    def _built_retriever(self, manifest: Path) -> FaissRetriever | ShardedRetriever:
        """The shards an ``index.json`` lists, their recorded search parameters set, rows mapped to entities."""
        _, specs = read_manifest(manifest)
        shards, seen = [], set()
        for spec in specs:
            shard = load_shard(spec)
            unknown = [d for d in shard.docids if d not in self.entity_row]
            if unknown:
                raise ValueError(
                    f"{spec.ids_path}: {len(unknown)} ids are no entity of {self.root}: {unknown[:3]}"
                )
            rows = [self.entity_row[d] for d in shard.docids]
            shard.payload = lambda r, rows=rows: self.entity_payload(rows[r])
            shards.append(shard)
            seen.update(shard.docids)
        if len(seen) != len(self.entities) or sum(len(s.docids) for s in shards) != len(self.entities):
            raise ValueError(
                f"{manifest} indexes {sum(len(s.docids) for s in shards)} rows ({len(seen)} distinct ids) "
                f"for {len(self.entities)} entities: rebuild it from the KB's encoded entities"
            )
        return shards[0] if len(shards) == 1 else ShardedRetriever(shards)

    def candidate_retriever(self) -> CandidateListRetriever:
        """The precomputed candidate lists, keyed by absolute query image path."""
        if "candidates" not in self._retrievers:
            rankings: dict[str, Sequence[str]] = {
                self.resolve(p): list(c)
                for p, c in zip(self.queries["image"], self.queries["candidates"], strict=True)
            }
            self._retrievers["candidates"] = CandidateListRetriever(
                rankings, lambda docid: self.entity_payload(self.entity_row[docid])
            )
        return self._retrievers["candidates"]

    def text_retrievers(self) -> tuple[str, ...]:
        """The text retrievers this KB has: kb.json's ``text_retrievers``, else bm25 plus dense when the
        manifest names a text encoder and the passage vectors exist (KBs written before the field)."""
        recorded = self.manifest.get("text_retrievers")
        if recorded is not None:
            unknown = set(recorded) - set(TEXT_RETRIEVERS)
            if unknown:
                raise ValueError(f"{self.root / MANIFEST}: unknown text_retrievers {sorted(unknown)}")
            return tuple(recorded)
        dense = (
            self.manifest.get("text_encoder") and (self.root / "index" / "passage_embeddings.npy").exists()
        )
        return ("bm25", "dense") if dense else ("bm25",)

    def default_text_retriever(self) -> str:
        """The paper's text search where the KB has it (dense E5 vectors, MMAgent-R² C.1), else BM25."""
        return "dense" if "dense" in self.text_retrievers() else "bm25"

    def text_retriever(self, kind: str) -> Any:
        """``bm25`` over passages, or ``dense`` (the manifest's text encoder over stored passage vectors)."""
        if kind not in self._retrievers:
            ids = self.passages["passage_id"].tolist()
            if kind == "bm25":
                self._retrievers[kind] = BM25Retriever.load(
                    self.root / "index" / "bm25", ids, self.passage_payload
                )
            elif kind == "dense":
                from ragym.envs.retrieval.encoders import make_text_encoder

                spec = self.manifest.get("text_encoder")
                if spec is None:
                    raise ValueError(
                        f"{self.root / MANIFEST} names no text_encoder; dense text search needs one"
                    )
                vectors = _vectors(self.root / "index" / "passage_embeddings.npy")
                dense = FaissRetriever.from_vectors(vectors, ids, self.passage_payload)
                self._retrievers[kind] = EncodedRetriever(dense, make_text_encoder(spec).encode_queries)
            else:
                raise ValueError(f"unknown text retriever {kind!r}; expected bm25 or dense")
        return self._retrievers[kind]


@dataclass(frozen=True)
class KBRetrievers:
    """A KB's own retrievers as a ``RetrieverSource``, searched in process under the service's names:
    ``candidates`` (the stored lists), ``image`` (live faiss search with ``index``), ``bm25`` and ``dense``."""

    kb: KnowledgeBase
    index: IndexSpec = DEFAULT_SPEC
    """The faiss index of live ``image`` search (``KBVQAConfig.index_kind``)."""

    def retriever(self, name: str) -> Any:
        """The KB's retriever ``name`` (built once per KB and shared by every env on its path)."""
        if name == "candidates":
            return self.kb.candidate_retriever()
        if name == "image":
            return self.kb.versioned_image(self.index)
        return self.kb.text_retriever(name)


def _check_layout(root: Path) -> None:
    missing = [name for name in REQUIRED_FILES if not (root / name).exists()]
    if missing:
        raise FileNotFoundError(f"{root} is not a KB-VQA knowledge base: missing {missing}")
    manifest = json.loads((root / MANIFEST).read_text())
    if manifest.get("format") != KB_FORMAT or manifest.get("version") != KB_VERSION:
        raise ValueError(f"{root / MANIFEST}: expected format {KB_FORMAT!r} version {KB_VERSION}")


@functools.lru_cache(maxsize=8)
def _load(root: str) -> KnowledgeBase:
    path = Path(root)
    _check_layout(path)
    queries_emb = path / "index" / "query_embeddings.npy"
    return KnowledgeBase(
        root=path,
        manifest=json.loads((path / MANIFEST).read_text()),
        entities=pd.read_parquet(path / "entities.parquet"),
        passages=pd.read_parquet(path / "passages.parquet"),
        queries=pd.read_parquet(path / "queries.parquet"),
        # memory-mapped: a KB searched through its built index never reads these, and env processes that
        # do (a flat index built at load) share the page cache instead of a copy each
        entity_embeddings=_vectors(path / "index" / "entity_embeddings.npy", mmap_mode="r"),
        query_embeddings=_vectors(queries_emb) if queries_emb.exists() else None,
    )


def _vectors(path: Path, mmap_mode: Literal["r"] | None = None) -> np.ndarray:
    """The 2-D vectors stored at ``path``; a file cut short or of another kind is a ``ValueError`` naming it."""
    try:
        vectors = np.load(path, mmap_mode=mmap_mode)
    except (ValueError, EOFError) as error:  # numpy names no file: "mmap length is greater than file size"
        raise ValueError(f"{path}: not a whole .npy array ({error}); a partial copy?") from None
    if vectors.ndim != 2:
        raise ValueError(f"{path}: expected 2-D vectors, got shape {vectors.shape}")
    return vectors


def load_kb(root: str | Path) -> KnowledgeBase:
    """Load (once per process) the KB at ``root``; a missing file or wrong format is a clear error."""
    return _load(str(Path(root).resolve()))
