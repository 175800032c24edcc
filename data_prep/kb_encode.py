"""The one place real KB preparation encodes images and texts: through the shared encoding step.

Everything ``ragym.data_prep.kb_build`` embeds goes through ``encode``: entity images with titles, query images and
passages, as ``ragym.data_prep.encoding`` items (sharded, resumable vector shards with a progress bar; the same
encoders run as Ray Data actors at scale). The models are ``ragym.envs.retrieval.encoders``: EVA-CLIP image+title, E5 with its
prefixes, or the CPU pixel features.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragym.data_prep.encoding import EncodeConfig, EncoderSpec, Item, encode_to_array

ROLES = ("entities", "queries", "passages")


def encoder_spec(spec: dict[str, Any], kind: str) -> EncoderSpec:
    """The encoding step's spec for a KB manifest entry ``{"name", "kwargs"}`` used as ``kind``."""
    kwargs = dict(spec.get("kwargs") or {})
    device = kwargs.get("device", "cpu") if spec["name"] == "eva_clip" else kwargs.pop("device", "cpu")
    return EncoderSpec(name=spec["name"], role=kind, kwargs=kwargs, device=device)


def encode(
    kind: str,
    spec: dict[str, Any],
    ids: Sequence[str],
    items: Sequence[str],
    titles: Sequence[str] | None = None,
    out_dir: Path | None = None,
) -> np.ndarray:
    """Encode ``items`` as ``kind``: ``entities`` (image paths + ``titles``), ``queries`` (query image paths)
    or ``passages`` (texts); float32 (len(items), dim) in input order. ``out_dir`` keeps the vector shards,
    so an interrupted run resumes from the last complete shard; ``ids`` name the items' content, so a resumed
    run whose input changed fails by name instead of reusing stale vectors.
    """
    if kind not in ROLES:
        raise ValueError(f"unknown encoding kind {kind!r}; expected one of {ROLES}")
    if kind == "entities" and (titles is None or len(titles) != len(items)):
        raise ValueError("entity encoding needs one title per image")
    if len(ids) != len(items):
        raise ValueError(f"{len(ids)} ids for {len(items)} items")
    if not items:
        raise ValueError(f"nothing to encode as {kind}")
    if kind == "entities":
        assert titles is not None  # checked above
        stream = [Item(i, text=t, image=p) for i, p, t in zip(ids, items, titles, strict=True)]
    elif kind == "queries":
        stream = [Item(i, image=p) for i, p in zip(ids, items, strict=True)]
    else:
        stream = [Item(i, text=t) for i, t in zip(ids, items, strict=True)]
    return encode_to_array(stream, encoder_spec(spec, kind), out_dir, EncodeConfig())
