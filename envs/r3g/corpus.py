"""The R3G image corpus on disk, coarse retrieval over it, and the two-stage score fusion.

Task folder layout (written by ``ragym.data_prep.mragbench`` and ``ragym.data_prep.r3g_synthetic``)::

    DIR/corpus/manifest.json      {"image_encoder": {"name": ..., "kwargs": {...}}, "num_images": n}
    DIR/corpus/corpus.parquet     image_id, path (relative to DIR), caption ("" when the source has none)
    DIR/corpus/embeddings.npy     (n, dim) float32, L2-normalised, row i = corpus.parquet row i
    DIR/queries/embeddings.npy    (m, dim) query-image features, row i = queries/queries.parquet row i
    DIR/queries/queries.parquet   path (relative to DIR) of each query image
    DIR/data/{train,test}.parquet verl rows for ``R3G-v0``

Query images without a stored feature are encoded with the corpus's own encoder (or an injected one), so
they land in the same space.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ragym.envs.image_cache import decode_image
from ragym.envs.retrieval.encoders import ImageEncoder, make_image_encoder
from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.retrievers import normalise


def read_rgb(path: Path) -> np.ndarray:
    """An image file as uint8 (H, W, 3); ``UnreadableImageError`` naming it when it does not decode."""
    return decode_image(path)


@dataclass
class ImageCorpus:
    """The image knowledge base of one R3G task folder, with its features for cosine search."""

    root: Path
    image_ids: list[str]
    paths: list[str]
    captions: list[str]
    embeddings: np.ndarray  # (n, dim), unit rows
    encoder_spec: dict[str, Any]
    query_features: dict[str, np.ndarray]
    """Stored query-image features by path relative to ``root``."""

    @classmethod
    def load(cls, root: str | Path) -> ImageCorpus:
        """Read a task folder; a missing or inconsistent file is an error naming it."""
        root = Path(root)
        manifest_path = root / "corpus" / "manifest.json"
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{root} is not an R3G task folder: {manifest_path} is missing")
        manifest = json.loads(manifest_path.read_text())
        table = pd.read_parquet(root / "corpus" / "corpus.parquet")
        vectors = np.load(root / "corpus" / "embeddings.npy")
        if len(vectors) != len(table):
            raise ValueError(f"{root}/corpus: {len(vectors)} embeddings for {len(table)} images")
        if table["image_id"].duplicated().any():
            raise ValueError(f"{root}/corpus/corpus.parquet has duplicate image_id values")
        queries: dict[str, np.ndarray] = {}
        qpath = root / "queries" / "queries.parquet"
        if qpath.is_file():
            qvecs = np.load(root / "queries" / "embeddings.npy")
            qpaths = pd.read_parquet(qpath)["path"].tolist()
            if len(qvecs) != len(qpaths):
                raise ValueError(f"{root}/queries: {len(qvecs)} embeddings for {len(qpaths)} query images")
            queries = dict(zip(qpaths, normalise(qvecs), strict=True))
        return cls(
            root,
            table["image_id"].astype(str).tolist(),
            table["path"].tolist(),
            table["caption"].fillna("").astype(str).tolist(),
            normalise(vectors),
            manifest["image_encoder"],
            queries,
        )

    def __len__(self) -> int:
        return len(self.image_ids)

    def image(self, index: int) -> np.ndarray:
        """Corpus image ``index`` as uint8 (H, W, 3)."""
        return read_rgb(self.root / self.paths[index])

    @cached_property
    def _row_of(self) -> dict[str, int]:
        return {image_id: row for row, image_id in enumerate(self.image_ids)}

    def rows_of(self, image_ids: list[str]) -> list[int]:
        """Corpus rows of ``image_ids``, in their order; an id the corpus lacks is an error naming it."""
        unknown = [i for i in image_ids if i not in self._row_of]
        if unknown:
            raise ValueError(f"{self.root}: image ids {unknown[:5]} are not in corpus/corpus.parquet")
        return [self._row_of[i] for i in image_ids]

    def similarities(self, query: np.ndarray, rows: list[int]) -> list[float]:
        """Cosine similarity of the unit ``query`` to each of ``rows``."""
        return [float(s) for s in self.embeddings[rows] @ query]  # (len(rows),)

    def query_vector(self, path: str, encoder: ImageEncoder | None) -> np.ndarray:
        """The unit feature of a query image: stored, else encoded (``encoder`` or the corpus's own)."""
        if path in self.query_features:
            return self.query_features[path]
        encoder = encoder or make_image_encoder(self.encoder_spec)
        return normalise(encoder.encode_queries([read_rgb(self.root / path)]))[0]

    def coarse(self, query: np.ndarray, pool_size: int) -> tuple[list[int], list[float]]:
        """Top ``pool_size`` corpus rows by cosine similarity (ties: lower row first) and their similarities."""
        sims = self.embeddings @ query  # (n,)
        order = np.lexsort((np.arange(len(sims)), -sims))[:pool_size]
        return [int(i) for i in order], [float(sims[i]) for i in order]


class CoarseRetriever:
    """R3G's coarse search over an ``ImageCorpus`` as a ``Retriever``: queries are unit image features, hits
    the corpus images by cosine similarity (ties: lower row first)."""

    def __init__(self, corpus: ImageCorpus):
        self.corpus = corpus

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        """The top ``k`` corpus images for one unit query feature (``docid``: the corpus ``image_id``)."""
        rows, sims = self.corpus.coarse(query, k)
        return [Hit(self.corpus.image_ids[r], s) for r, s in zip(rows, sims, strict=True)]

    def batch_search(self, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        """``search`` per query."""
        return [self.search(q, k) for q in queries]


def stage1_scores(similarities: list[float], temperature: float) -> list[float]:
    """Temperature-scaled softmax of the pool's cosine similarities (R3G's Stage-1 score).

    >>> [round(s, 3) for s in stage1_scores([0.9, 0.8], 0.1)]
    [0.731, 0.269]
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    logits = np.asarray(similarities, dtype=np.float64) / temperature
    weights = np.exp(logits - logits.max())
    return (weights / weights.sum()).tolist()


@dataclass(frozen=True)
class JudgeWeights:
    """R3G's fixed aggregation weights of the judge sub-scores (paper: 0.20, 0.35, 0.45)."""

    r: float = 0.20
    """Semantic relatedness."""
    t: float = 0.35
    """Target correspondence."""
    a: float = 0.45
    """Answerability."""

    def stage2(self, r: float, t: float, a: float) -> float:
        """Stage-2 = w_r r + w_t t + w_a a."""
        return self.r * r + self.t * t + self.a * a


RERANK_MODES = ("fused", "stage1", "stage2", "none")
"""Which score ranks the pool: Stage-1 + Stage-2 (R3G), Stage-1 only (ablation), Stage-2 only (ablation), or
none (MRAG: the pool in the order its retriever returned it)."""
JUDGED_MODES = ("fused", "stage2")
"""The rerank modes with a judge turn."""
POOL_SOURCES = ("corpus", "benchmark")
"""Where the pool comes from: ragym's coarse retrieval over the corpus (R3G's Stage-1), or the row's own
``retrieved_images`` (MRAG-Bench's CLIP top-5, the MRAG baseline's evidence), in the benchmark's order."""


def final_scores(stage1: list[float], stage2: list[float], mode: str) -> list[float]:
    """The score each pooled candidate is ranked by under ``mode``."""
    if mode == "fused":
        return [s1 + s2 for s1, s2 in zip(stage1, stage2, strict=True)]
    if mode == "stage1":
        return list(stage1)
    if mode == "stage2":
        return list(stage2)
    if mode == "none":  # no score: every tie keeps the pool's own (retrieval) order
        return [0.0] * len(stage1)
    raise ValueError(f"rerank mode must be one of {RERANK_MODES}, got {mode!r}")


def top_k(scores: list[float], k: int) -> list[int]:
    """Pool positions of the ``k`` best scores; ties keep pool (Stage-1) order.

    >>> top_k([0.2, 0.9, 0.9, 0.1], 2)
    [1, 2]
    """
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
