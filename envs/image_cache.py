"""Every env's decoded images: read once per process, fitted to the recipe's visual-token budget, and kept in one
cache bounded in bytes (``ragym.images.cache_bytes``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
from PIL import Image

from ragym.envs.byte_cache import ByteLRU
from ragym.envs.image_budget import ImageBudget

log = logging.getLogger(__name__)

IMAGE_CACHE_ENV = "RAGYM_IMAGE_CACHE_BYTES"
"""Environment variable with the default byte budget of this process's decoded-image cache."""
DEFAULT_IMAGE_CACHE_BYTES = 1 << 30
"""1 GiB: ~5,000 candidates fitted to 256 tokens (448 x 448 x 3 bytes), ~1,300 query images at 1,024."""
IMAGE_CACHE: ByteLRU[np.ndarray] = ByteLRU(int(os.environ.get(IMAGE_CACHE_ENV, DEFAULT_IMAGE_CACHE_BYTES)))
"""Decoded (and fitted) images of this process, bounded in bytes (``configure_image_cache``)."""


def configure_image_cache(max_bytes: int) -> None:
    """Set this process's decoded-image cache budget (the recipe's ``ragym.images.cache_bytes``), logged."""
    IMAGE_CACHE.resize(max_bytes)
    log.info("decoded-image cache: %d bytes (%.2f GiB) per process", max_bytes, max_bytes / (1 << 30))


def _decode(path: str) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image if image.mode == "RGB" else image.convert("RGB"), dtype=np.uint8)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def clear_image_cache() -> None:
    """Forget every decoded image (a check that reads many rows' images once bounds its memory with this)."""
    IMAGE_CACHE.clear()


def read_image(path: str | Path, budget: ImageBudget | None = None, role: str = "query") -> np.ndarray:
    """The image at ``path`` as uint8 (H, W, 3), fitted to ``budget``'s ``role`` pixels when one is given;
    decoded and fitted once per process while it stays in the byte-bounded cache (read-only)."""
    key = (str(path), None if budget is None else (budget, role))
    return IMAGE_CACHE.get_or_compute(key, lambda: _read_only(_fitted(str(path), budget, role)), _nbytes)


def _fitted(path: str, budget: ImageBudget | None, role: str) -> np.ndarray:
    image = _decode(path)
    return image if budget is None else budget.fit(image, role)


def _nbytes(array: np.ndarray) -> int:
    return array.nbytes


def cached_fit(key: object, image: np.ndarray, budget: ImageBudget, role: str) -> np.ndarray:
    """``image`` (already decoded, e.g. from an image pack) fitted to ``budget``'s ``role`` pixels, computed once
    per ``key`` while it stays in the cache (read-only)."""
    return IMAGE_CACHE.get_or_compute(key, lambda: _read_only(budget.fit(image, role)), _nbytes)
