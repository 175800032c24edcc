"""Images by reference: what crosses a hop ragym owns is a content digest and where to read the pixels again,
not the pixels.

An ``ImageRef`` pickles to a few hundred bytes whatever the image's size; ``resolve`` gives the pixels back on the
consumer's side through the process's byte-bounded image cache (``ragym.envs.image_cache``): from the cache while
they are there, else from the file they were decoded from (checked against the digest), else a
``MissingImageError`` that names the image. An image an env read with ``read_image`` is referred to by file and
resolves in any process that sees that file; any other (an image pack's slice, a synthetic picture) by content
alone, kept in this process's cache, so it resolves here while the cache holds it.

>>> import numpy as np
>>> ref = image_ref(np.full((28, 56, 3), 7, np.uint8))
>>> (ref.height, ref.width, ref.path), int(ref.resolve()[0, 0, 0])
((28, 56, None), 7)
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ragym.envs.image_budget import ImageBudget
from ragym.envs.image_cache import (
    IMAGE_CACHE,
    cache_key,
    cached_image,
    content_digest,
    image_source,
    read_image,
)


class MissingImageError(LookupError):
    """A reference whose pixels are neither in this process's image cache nor in a file that still holds them."""


@dataclass(frozen=True)
class ImageRef:
    """One image by reference: its content digest, its size, and the file it was read from (if any)."""

    digest: str
    """``ragym.envs.image_cache.content_digest`` of the pixels (size included)."""
    height: int
    width: int
    path: str | None = None
    """The file the pixels were decoded from (then fitted to ``budget``'s ``role`` pixels); None: content only."""
    budget: ImageBudget | None = None
    """The visual-token budget the file's image was fitted to (None: as decoded)."""
    role: str = "query"
    """``query`` or ``candidate``: which of ``budget``'s limits applied."""

    @property
    def nbytes(self) -> int:
        """Bytes of the pixels it stands for (uint8 RGB)."""
        return self.height * self.width * 3

    def resolve(self) -> np.ndarray:
        """The pixels, uint8 (H, W, 3) read-only: cached, else re-read from ``path``; checked against the digest."""
        if self.path is None:
            cached = cached_image(_content_key(self.digest))
            if cached is None:
                raise MissingImageError(
                    f"image {self.digest} ({self.width}x{self.height}) is not in this process's image cache and "
                    "has no file to read it from: it was evicted (raise ragym.images.cache_bytes) or is resolved "
                    "in a process that never held it"
                )
            return cached
        pixels = cached_image(cache_key(self.path, self.budget, self.role))
        if pixels is None:
            if not Path(self.path).is_file():
                raise MissingImageError(f"image {self.digest}: its file {self.path} is gone")
            pixels = read_image(self.path, self.budget, self.role)
        # Checked even when cached: the file may have been read again, changed, since the reference was made.
        if content_digest(pixels) != self.digest:
            raise MissingImageError(
                f"image {self.digest}: {self.path} no longer holds it (its pixels changed since it was read)"
            )
        return pixels


def image_ref(image: np.ndarray | Image.Image, keep: bool = True) -> ImageRef:
    """A reference to ``image`` (uint8 H x W x 3 or a PIL image): by file when this process read it with
    ``read_image`` (the latest such file, while it exists), else by content, its pixels kept in the byte-bounded image cache under their digest
    (``keep``; without, a content-only reference names the image but resolves nowhere)."""
    pixels = np.asarray(image.convert("RGB") if isinstance(image, Image.Image) else image, dtype=np.uint8)
    digest = content_digest(pixels)
    height, width = pixels.shape[:2]
    source = image_source(digest)
    if source is not None and Path(source[0]).is_file():  # a file deleted since it was read refers to nothing
        return ImageRef(digest, height, width, *source)
    if keep:
        IMAGE_CACHE.get_or_compute(_content_key(digest), lambda: _read_only_copy(pixels), _nbytes)
    return ImageRef(digest, height, width)


def as_pixels(image: Any) -> Any:
    """``image`` itself, or the pixels of an ``ImageRef`` (what a processor is given)."""
    return image.resolve() if isinstance(image, ImageRef) else image


def pickled_image_bytes(value: Any) -> tuple[int, int]:
    """``(bytes of value pickled, bytes of image payload among them)``: every PIL image, uint8 array of two or more
    dimensions (pixels) and floating-point tensor (a processor's ``pixel_values``) pickled with it: what a hop that
    pickles ``value`` carries as images."""
    counter = _PayloadCounter(io.BytesIO())
    counter.dump(value)
    return counter.num_bytes(), counter.payload


def _content_key(digest: str) -> tuple[str, str]:
    return ("ref", digest)


def _read_only_copy(pixels: np.ndarray) -> np.ndarray:
    # A copy: the caller's array may be written to later, the cache's may not.
    copy = np.array(pixels, dtype=np.uint8)
    copy.setflags(write=False)
    return copy


def _nbytes(array: np.ndarray) -> int:
    return array.nbytes


class _PayloadCounter(pickle.Pickler):
    """A pickler that adds up the bytes of the image-like objects it meets."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.file, self.payload = file, 0

    def persistent_id(self, obj: Any) -> None:
        if isinstance(obj, np.ndarray) and obj.dtype == np.uint8 and obj.ndim >= 2:
            self.payload += obj.nbytes
        elif isinstance(obj, Image.Image):
            self.payload += len(obj.getbands()) * obj.width * obj.height
        elif type(obj).__module__ == "torch" and getattr(obj, "is_floating_point", lambda: False)():
            # A torch tensor (torch is not imported here); pyright still holds the ndarray of the first test.
            tensor: Any = obj
            self.payload += tensor.element_size() * tensor.nelement()
        return None  # pickled as usual

    def num_bytes(self) -> int:
        return self.file.tell()
