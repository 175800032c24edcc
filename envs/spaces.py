"""Gymnasium spaces for text-and-image observations: free text and a variable-length tuple of RGB images."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class FreeText(spaces.Space[str]):
    """Any string up to ``max_length`` characters (``spaces.Text`` would restrict the alphabet)."""

    def __init__(self, max_length: int, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A short random printable-ASCII string."""
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        return "".join(chr(c) for c in self.np_random.integers(32, 127, size=length))

    def contains(self, x: Any) -> bool:
        """True for a ``str`` no longer than ``max_length``."""
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """Text has no fixed-size vector form."""
        return False

    def __repr__(self) -> str:
        return f"FreeText(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length


class ImageTuple(spaces.Space[tuple]):
    """A tuple of at most ``max_images`` uint8 RGB images (H, W, 3) of any size up to ``max_side``."""

    def __init__(self, max_images: int, max_side: int, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_images = max_images
        self.max_side = max_side

    def sample(self, mask: Any = None, probability: Any = None) -> tuple[np.ndarray, ...]:
        """A few random small images."""
        count = int(self.np_random.integers(0, min(self.max_images, 3) + 1))
        return tuple(self.np_random.integers(0, 256, size=(8, 8, 3), dtype=np.uint8) for _ in range(count))

    def contains(self, x: Any) -> bool:
        """True for a tuple of uint8 (H, W, 3) arrays within the limits."""
        return (
            isinstance(x, tuple)
            and len(x) <= self.max_images
            and all(
                isinstance(im, np.ndarray)
                and im.dtype == np.uint8
                and im.ndim == 3
                and im.shape[2] == 3
                and max(im.shape[:2]) <= self.max_side
                for im in x
            )
        )

    @property
    def is_np_flattenable(self) -> bool:
        """Image lists vary in length and size."""
        return False

    def __repr__(self) -> str:
        return f"ImageTuple(max_images={self.max_images}, max_side={self.max_side})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ImageTuple) and (other.max_images, other.max_side) == (
            self.max_images,
            self.max_side,
        )


def text_image_space(max_chars: int, max_images: int, max_side: int) -> spaces.Dict:
    """The observation space ``{"text": FreeText, "images": ImageTuple}`` shared by ragym envs."""
    return spaces.Dict({"text": FreeText(max_chars), "images": ImageTuple(max_images, max_side)})
