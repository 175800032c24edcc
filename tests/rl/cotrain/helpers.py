"""Rows of the tiny synthetic KB set to live search, and a weak (distorted) query encoder over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.registry import synthetic_data
from ragym.envs.retrieval.versions import QueryEncoder, save_query_encoder


def tiny_rows(split: str) -> list[dict[str, Any]]:
    """The tiny KB's rows of ``split``, their env kwargs set to live image search."""
    kb_dir = synthetic_data("kbvqa", "tiny")
    rows = pd.read_parquet(Path(kb_dir) / "data" / f"{split}.parquet").to_dict("records")
    for row in rows:
        info = dict(row["extra_info"])
        info["env_kwargs"] = json.dumps({**json.loads(info["env_kwargs"]), "candidate_source": "live"})
        row["extra_info"] = info
    return rows


def options(row: dict[str, Any]) -> dict[str, Any]:
    """A row's env options."""
    return json.loads(row["extra_info"]["env_options"])


def weak_encoder(folder: Path, rank: int = 8, strength: float = 2.0, seed: int = 0) -> Path:
    """A query encoder W = I + strength * sqrt(d) U V^T (U, V Gaussian / sqrt(d), rank ``rank``) over the tiny KB:
    a retriever made weak on purpose."""
    dim = load_kb(synthetic_data("kbvqa", "tiny")).entity_embeddings.shape[1]
    rng = np.random.default_rng(seed)
    u, v = (rng.standard_normal((dim, rank)).astype(np.float32) / dim**0.5 for _ in range(2))
    matrix = np.eye(dim, dtype=np.float32) + strength * dim**0.5 * (u @ v.T)
    return save_query_encoder(QueryEncoder("weak", matrix, {"made_by": "test"}), folder)
