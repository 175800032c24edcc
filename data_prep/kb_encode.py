"""The one place real KB preparation encodes images and texts (switchable to the shared encoding step).

Everything ``data_prep.kb_build`` embeds goes through ``encode``: entity images with titles, query images
and passages. It batches, shows a tqdm progress bar and returns float32 (n, dim) arrays; the encoders
themselves are ``envs.encoders`` (EVA-CLIP image+title, E5 with its prefixes, or the CPU pixel features).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from envs.kb import read_image

BATCH = 256
"""Items per encoder call: bounds memory (images are decoded one batch at a time)."""


def _load(images: Sequence[Any]) -> list[np.ndarray]:
    return [np.array(read_image(p)) if isinstance(p, str) else p for p in images]


def encode(kind: str, encoder: Any, items: Sequence[Any], titles: Sequence[str] | None = None) -> np.ndarray:
    """Encode ``items`` with ``encoder`` as ``kind``: ``entities`` (image paths + ``titles``), ``queries``
    (query image paths) or ``passages`` (texts); float32 (len(items), dim), rows in input order.
    """
    calls: dict[str, Callable[[int, int], np.ndarray]] = {
        "entities": lambda a, b: encoder.encode_entities(_load(items[a:b]), list(titles[a:b])),
        "queries": lambda a, b: encoder.encode_queries(_load(items[a:b])),
        "passages": lambda a, b: encoder.encode_passages(list(items[a:b])),
    }
    if kind not in calls:
        raise ValueError(f"unknown encoding kind {kind!r}; expected one of {sorted(calls)}")
    if kind == "entities" and (titles is None or len(titles) != len(items)):
        raise ValueError("entity encoding needs one title per image")
    chunks = []
    with tqdm(total=len(items), desc=f"encode {kind}", unit="item", mininterval=2.0) as bar:
        for start in range(0, len(items), BATCH):
            end = min(len(items), start + BATCH)
            chunks.append(np.asarray(calls[kind](start, end), dtype=np.float32))
            bar.update(end - start)
    if not chunks:
        raise ValueError(f"nothing to encode as {kind}")
    return np.concatenate(chunks)
