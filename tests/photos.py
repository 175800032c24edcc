"""Multi-megapixel photographs made at test time (no download): skimage's sample photos, upscaled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from skimage import data

SOURCES = ("astronaut", "chelsea", "coffee", "rocket")
"""skimage.data colour photos the fixtures cycle through."""


def photo(width: int, height: int, index: int = 0) -> np.ndarray:
    """A ``width x height`` uint8 RGB photograph (skimage photo ``index`` mod 4, resized bicubically)."""
    source = Image.fromarray(getattr(data, SOURCES[index % len(SOURCES)])())
    return np.asarray(source.resize((width, height), Image.Resampling.BICUBIC), dtype=np.uint8)


def write_photo(path: Path, width: int, height: int, index: int = 0) -> Path:
    """Save ``photo(width, height, index)`` as a JPEG at ``path`` (any extension: readers sniff the format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(photo(width, height, index)).save(path, format="JPEG", quality=90)
    return path
