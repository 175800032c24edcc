"""Every env's decoded images: read once per process, fitted to the recipe's visual-token budget, and kept in one
cache bounded in bytes (``ragym.images.cache_bytes``)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np
from PIL import ExifTags, Image, ImageOps

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


def rgb_pixels(image: Image.Image) -> np.ndarray:
    """``image`` upright (its EXIF orientation applied, as transformers' ``load_image`` does) as uint8 (H, W, 3):
    every decoder's one conversion, so prep, encoding and the envs see the same pixels. A 16-bit, 32-bit or float
    image is scaled to 8 bits (``convert("RGB")`` clips it at 255: a 16-bit grayscale PNG turned white)."""
    if image.getexif().get(ExifTags.Base.Orientation, 1) != 1:  # exif_transpose copies even an upright image
        image = ImageOps.exif_transpose(image)
    if image.mode in ("I", "F") or image.mode.startswith("I;"):
        image = Image.fromarray(_eight_bit(np.asarray(image)))
    return np.asarray(image if image.mode == "RGB" else image.convert("RGB"), dtype=np.uint8)


def _eight_bit(values: np.ndarray) -> np.ndarray:
    """Gray values as uint8: integers from a 16-bit scale and floats from [0, 1] (how PIL reads 16-bit PNG, TIFF
    and PGM files, and float TIFFs), or from the image's own range when its values fall outside that scale.

    >>> _eight_bit(np.array([0, 257, 65535], np.uint16)).tolist(), _eight_bit(np.array([0.0, 0.5, 1.0])).tolist()
    ([0, 1, 255], [0, 128, 255])
    >>> _eight_bit(np.array([-10, 0, 10], np.int32)).tolist()
    [0, 128, 255]
    """
    low, high = (0.0, 1.0) if values.dtype.kind == "f" else (0.0, 65535.0)
    values = np.nan_to_num(values.astype(np.float32))
    if values.size and (values.min() < low or values.max() > high):
        low, high = float(values.min()), float(values.max())
    scaled = (values - low) * (255 / max(high - low, 1e-12))
    return np.clip(np.round(scaled), 0, 255).astype(np.uint8)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def clear_image_cache() -> None:
    """Forget every decoded image (a check that reads many rows' images once bounds its memory with this)."""
    IMAGE_CACHE.clear()


ImageSource = tuple[str, ImageBudget | None, str]
"""Where a decoded image came from: (path, budget, role), the arguments of ``read_image`` that give it again."""
SOURCE_BYTES = 512
"""What one entry of the source index is charged (a digest, a path and a budget): ~30,000 entries in 16 MiB."""
_SOURCES: ByteLRU[ImageSource] = ByteLRU(16 << 20)
"""Content digest -> source of the images ``read_image`` decoded, so a reference to one names its file."""


def content_digest(image: np.ndarray) -> str:
    """A digest of a uint8 image's size and pixels (32 hex digits): equal pictures, equal digests.

    >>> content_digest(np.zeros((2, 3, 3), np.uint8)) == content_digest(np.zeros((2, 3, 3), np.uint8))
    True
    """
    digest = hashlib.blake2b(str(image.shape).encode(), digest_size=16)
    digest.update(np.ascontiguousarray(image).data)
    return digest.hexdigest()


def image_source(digest: str) -> ImageSource | None:
    """The ``(path, budget, role)`` this process read the image with ``digest`` from, if it did (and remembers)."""
    return _SOURCES.get(digest)


def cache_key(path: str | Path, budget: ImageBudget | None, role: str) -> tuple:
    """The cache key of ``read_image(path, budget, role)``."""
    return (str(path), None if budget is None else (budget, role))


def cached_image(key: object) -> np.ndarray | None:
    """The image cached under ``key`` (``cache_key`` or a reference's), else None; reads nothing."""
    return IMAGE_CACHE.get(key)


def read_image(path: str | Path, budget: ImageBudget | None = None, role: str = "query") -> np.ndarray:
    """The image at ``path`` as uint8 (H, W, 3), fitted to ``budget``'s ``role`` pixels when one is given;
    decoded and fitted once per process while it stays in the byte-bounded cache (read-only). Its digest is
    remembered with its source, so ``ragym.envs.image_ref`` can refer to it by file."""

    def decode() -> np.ndarray:
        image = _read_only(_fitted(str(path), budget, role))
        source = (str(path), budget, role)
        # The latest file read wins: the same picture read before from a file since deleted (an old run's copy
        # of a KB) must not leave references naming that file.
        _SOURCES.put(content_digest(image), source, _source_bytes(source))
        return image

    return IMAGE_CACHE.get_or_compute(cache_key(path, budget, role), decode, _nbytes)


def _source_bytes(source: ImageSource) -> int:
    return SOURCE_BYTES


class UnreadableImageError(ValueError):
    """An image file that cannot be shown (it does not decode, or the budget refuses its size); names the file."""

    @classmethod
    def of(cls, path: str | Path, err: Exception) -> UnreadableImageError:
        """The error for the image at ``path`` that ``err`` (which names no file) refused."""
        # PIL's "image file is truncated", its pixel limit and the budget's aspect ratio name no file: the episode
        # error or bad-row line would not say which of a row's images, or which candidate, it was.
        return cls(f"image {path}: {type(err).__name__}: {err}")


def decode_image(path: str | Path) -> np.ndarray:
    """The image at ``path`` as uint8 (H, W, 3) (``rgb_pixels``), uncached; ``UnreadableImageError`` naming the
    file when it does not decode (a missing file keeps its own ``FileNotFoundError``, which names it)."""
    try:
        with Image.open(path) as image:
            return rgb_pixels(image)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise UnreadableImageError.of(path, err) from err


def _fitted(path: str, budget: ImageBudget | None, role: str) -> np.ndarray:
    image = decode_image(path)
    try:
        return image if budget is None else budget.fit(image, role)
    except ValueError as err:
        raise UnreadableImageError.of(path, err) from err


def _nbytes(array: np.ndarray) -> int:
    return array.nbytes


def cached_fit(key: object, image: np.ndarray, budget: ImageBudget, role: str) -> np.ndarray:
    """``image`` (already decoded, e.g. from an image pack) fitted to ``budget``'s ``role`` pixels, computed once
    per ``key`` while it stays in the cache (read-only)."""
    return IMAGE_CACHE.get_or_compute(key, lambda: _read_only(budget.fit(image, role)), _nbytes)
