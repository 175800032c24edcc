"""Visual-token budgets: every image an env shows is fitted, once, to the pixels the policy may spend on it.

Qwen-VL processors turn an image into one visual token per ``factor x factor`` pixels after resizing it to
multiples of ``factor`` (patch size x merge size: 28 for Qwen2.5-VL, 32 for Qwen3-VL) with an area between
``min_pixels`` and ``max_pixels``. An env fits each image to its budget with the same rule, so the processor
(whose ``max_pixels`` the recipe sets to the largest budget) finds the image already at its target size and
resizes nothing: each image is resampled at most once, and its tokens are at most ``max_pixels / factor**2``.

>>> fit_size(2000, 3000, max_pixels=200_704, min_pixels=3136, factor=28)
(364, 532)
>>> visual_tokens(364, 532, factor=28)
247
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

BUDGET_FIELDS = ("query_max_pixels", "candidate_max_pixels", "image_min_pixels", "image_factor")
"""The env config fields that hold a budget; the recipe's ``ragym.images`` fills them in every env."""

MAX_ASPECT_RATIO = 200
"""Qwen-VL processors refuse images whose longer side exceeds 200 times the shorter one."""


@dataclass(frozen=True)
class ImageBudget:
    """Pixels one image may occupy after fitting; defaults: 1,024 tokens per query image, 256 per candidate
    (Qwen2.5-VL, factor 28), the KB-VQA recipe's settings (docs/scale.md)."""

    query_max_pixels: int = 1024 * 28 * 28
    """Most pixels of an image the task gives (a KB-VQA query image, R3G's and MEMORA's query image)."""
    candidate_max_pixels: int = 256 * 28 * 28
    """Most pixels of an image retrieval serves (a KB-VQA candidate, an R3G pool or evidence image)."""
    image_min_pixels: int = 56 * 56
    """Fewest pixels after fitting (the processor's ``min_pixels``): smaller images are enlarged to it."""
    image_factor: int = 28
    """Patch size x merge size of the policy's vision encoder: one visual token per factor x factor pixels."""

    def __post_init__(self) -> None:
        for name in BUDGET_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"image budget {name} must be a positive int, got {value!r}")
        least = self.image_factor**2
        if min(self.query_max_pixels, self.candidate_max_pixels) < max(self.image_min_pixels, least):
            raise ValueError(
                f"image budget: query_max_pixels and candidate_max_pixels must be >= image_min_pixels "
                f"({self.image_min_pixels}) and >= image_factor**2 ({least}), got {self}"
            )

    def max_pixels(self, role: str) -> int:
        """The pixel budget of a ``role`` image (``query`` or ``candidate``)."""
        if role not in ("query", "candidate"):
            raise ValueError(f"image role must be 'query' or 'candidate', got {role!r}")
        return self.query_max_pixels if role == "query" else self.candidate_max_pixels

    def fit(self, image: np.ndarray, role: str) -> np.ndarray:
        """``image`` fitted to the ``role`` budget (the same array when it needs no resize)."""
        return fit_image(image, self.max_pixels(role), self.image_min_pixels, self.image_factor)

    def needs_resize(self, height: int, width: int, role: str) -> bool:
        """Whether ``fit`` would resample a ``height x width`` image of ``role``."""
        return _needs_resize(height, width, self.max_pixels(role), self.image_min_pixels, self.image_factor)

    def max_tokens(self, role: str) -> int:
        """The most visual tokens one ``role`` image can cost."""
        return self.max_pixels(role) // self.image_factor**2

    def fitted_size(self, height: int, width: int, role: str) -> tuple[int, int]:
        """The (height, width) ``fit`` resizes a ``height x width`` image of ``role`` to when it ``needs_resize``."""
        return fitted_size(height, width, self.max_pixels(role), self.image_min_pixels, self.image_factor)


def budget_of(config: object) -> ImageBudget:
    """The budget an env config's ``BUDGET_FIELDS`` describe (validated)."""
    return ImageBudget(**{name: getattr(config, name) for name in BUDGET_FIELDS})


def shrunk_size(height: int, width: int, max_side: int) -> tuple[int, int]:
    """(height, width) with the longer side ``max_side`` and the ratio kept; the shorter side of an image within
    ``MAX_ASPECT_RATIO`` is never rounded past it (rounded down, a 50 x 10,000 strip at 448 became 2 x 448, which
    every budget refuses), and one past it stays past it (refused, as at full size).

    >>> shrunk_size(10_000, 50, 448), shrunk_size(3000, 2000, 448), shrunk_size(40, 10_000, 448)
    ((448, 3), (448, 299), (2, 448))
    """
    longer, shorter = max(height, width), min(height, width)
    size = max(1, round(shorter * max_side / longer))
    if longer <= MAX_ASPECT_RATIO * shorter:
        size = max(size, math.ceil(max_side / MAX_ASPECT_RATIO))
    return (max_side, size) if height >= width else (size, max_side)


def fit_size(height: int, width: int, max_pixels: int, min_pixels: int, factor: int) -> tuple[int, int]:
    """The (height, width) a Qwen-VL processor resizes an image to: multiples of ``factor``, area within
    [``min_pixels``, ``max_pixels``], aspect ratio kept as closely as rounding allows."""
    if max(height, width) > MAX_ASPECT_RATIO * min(height, width):
        raise ValueError(
            f"a {width}x{height} image exceeds the aspect ratio {MAX_ASPECT_RATIO} Qwen-VL accepts"
        )
    fitted_h, fitted_w = round(height / factor) * factor, round(width / factor) * factor
    if fitted_h * fitted_w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        fitted_h = max(factor, math.floor(height / scale / factor) * factor)
        fitted_w = max(factor, math.floor(width / scale / factor) * factor)
    elif fitted_h * fitted_w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        fitted_h = math.ceil(height * scale / factor) * factor
        fitted_w = math.ceil(width * scale / factor) * factor
    return fitted_h, fitted_w


def visual_tokens(height: int, width: int, factor: int) -> int:
    """Visual tokens of an image already at a fitted size (one per ``factor x factor`` block)."""
    return (height // factor) * (width // factor)


def fit_image(image: np.ndarray, max_pixels: int, min_pixels: int, factor: int) -> np.ndarray:
    """``image`` (uint8 H x W x 3) resized to its fitted size when a processor with a larger ``max_pixels``
    would give it more than ``max_pixels``; otherwise the same array (the processor's own rounding, one
    resampling either way). Bicubic, as the Qwen-VL processors resample."""
    height, width = image.shape[:2]
    if not _needs_resize(height, width, max_pixels, min_pixels, factor):
        return image
    fitted = fitted_size(height, width, max_pixels, min_pixels, factor)
    resized = Image.fromarray(np.ascontiguousarray(image)).resize(
        (fitted[1], fitted[0]), Image.Resampling.BICUBIC
    )
    return np.asarray(resized, dtype=np.uint8)


def fitted_size(height: int, width: int, max_pixels: int, min_pixels: int, factor: int) -> tuple[int, int]:
    """The size ``fit_image`` resamples to: ``fit_size``, its longer side cut to what ``max_pixels`` and
    ``MAX_ASPECT_RATIO`` allow, grown by whole blocks to ``min_pixels`` if rounding fell below it."""
    height, width = fit_size(height, width, max_pixels, min_pixels, factor)
    shorter = min(height, width)
    # A thin image's shorter side is rounded up to one block while the longer keeps its share of the pixels: the
    # size can pass max_pixels (the processor resizes it again, to fewer tokens than counted) and the ratio the
    # processor accepts (it refuses the image: it checks every image it is given).
    longest = min(MAX_ASPECT_RATIO * shorter, max_pixels // (shorter * factor) * factor)
    return _at_least(min(height, longest), min(width, longest), min_pixels, factor)


def _needs_resize(height: int, width: int, max_pixels: int, min_pixels: int, factor: int) -> bool:
    """Whether the budget, not the processor's own rounding, sets this image's fitted size."""
    unbounded = fit_size(height, width, math.inf, min_pixels, factor)  # type: ignore[arg-type]
    return fit_size(height, width, max_pixels, min_pixels, factor) != unbounded


def _at_least(height: int, width: int, min_pixels: int, factor: int) -> tuple[int, int]:
    """Grow the shorter side by whole blocks until the area reaches ``min_pixels``: a budget close to
    ``min_pixels`` can round an image below it, and the processor would then enlarge it (a second resize)."""
    while height * width < min_pixels:
        height, width = (height + factor, width) if height <= width else (height, width + factor)
    return height, width
