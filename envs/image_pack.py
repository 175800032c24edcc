"""Entity images stored decode-cheap: raw RGB bytes in one file, read through a memory map.

A cold SearchImage step used to open and decode K image files (PNG/JPEG) per batch, about a third of the
step on a 100k-entity KB. A pack holds every entity image already decoded, so serving a candidate is a
slice of a memory-mapped file: no file open, no decode, and the OS page cache shares the bytes between
every env process of a node (the G episodes of a group, and every group).

Layout, beside the KB's other index files::

    index/images.u8          uint8 RGB bytes of every entity image, entities.parquet row order
    index/images_index.npy   int64 (num_entities, 4): byte offset, height, width, channels (3)

``ragym prep image-pack KB_DIR [--max-side 448]`` writes it (``--max-side`` shrinks large images the
way the policy's processor would anyway, bounding the pack: see docs/service.md "Candidate images").
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from ragym.envs.files import atomic_write
from ragym.envs.image_budget import shrunk_size
from ragym.envs.image_cache import UnreadableImageError, decode_image

PACK_DATA = "index/images.u8"
PACK_INDEX = "index/images_index.npy"

log = logging.getLogger(__name__)


class ImagePack:
    """Read-only view of a KB's image pack."""

    def __init__(self, data: np.ndarray, index: np.ndarray):
        if index.ndim != 2 or index.shape[1] != 4:
            raise ValueError(f"an image pack index is (num_images, 4), got {index.shape}")
        self.data, self.index = data, index

    @classmethod
    def load(cls, kb_dir: str | Path) -> ImagePack | None:
        """The KB's pack, or None when it has none."""
        root = Path(kb_dir)
        if not (root / PACK_DATA).is_file() or not (root / PACK_INDEX).is_file():
            return None
        return cls(np.memmap(root / PACK_DATA, dtype=np.uint8, mode="r"), np.load(root / PACK_INDEX))

    def __len__(self) -> int:
        return len(self.index)

    def image(self, row: int) -> np.ndarray:
        """Entity ``row``'s image as uint8 (H, W, 3), read-only (a view of the mapped file)."""
        offset, height, width, channels = (int(x) for x in self.index[row])
        return np.asarray(self.data[offset : offset + height * width * channels]).reshape(
            height, width, channels
        )


def _decoded(path: Path, max_side: int | None) -> np.ndarray:
    pixels = decode_image(path)  # a missing or broken image fails here, naming the file
    height, width = pixels.shape[:2]
    if max_side and max(height, width) > max_side:
        new_height, new_width = shrunk_size(height, width, max_side)
        resized = Image.fromarray(pixels).resize((new_width, new_height))
        return np.asarray(resized, dtype=np.uint8)
    return pixels


def write_image_pack(kb_dir: str | Path, max_side: int | None = None) -> int:
    """Decode every entity image once and write the pack; returns the number of images (one per entity)."""
    root = Path(kb_dir)
    paths = pd.read_parquet(root / "entities.parquet", columns=["image"])["image"].tolist()
    index = np.zeros((len(paths), 4), dtype=np.int64)

    def write_data(tmp: Path) -> int:
        offset = 0
        with open(tmp, "wb") as out:
            for row, rel in enumerate(paths):
                pixels = _decoded(root / rel, max_side)
                out.write(pixels.tobytes())
                index[row] = (offset, *pixels.shape)
                offset += pixels.size
        np.save(root / PACK_INDEX, index)
        return offset

    offset = atomic_write(root / PACK_DATA, write_data)  # the data appears last and whole: never half a pack
    log.info("packed %d entity images (%.1f MB) into %s", len(paths), offset / 1e6, root / PACK_DATA)
    return len(paths)


def main(argv: list[str]) -> int:
    """Write a KB's image pack."""
    parser = argparse.ArgumentParser(
        prog="ragym prep image-pack", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("kb_dir")
    parser.add_argument("--max-side", type=int, help="shrink images whose longer side exceeds this")
    args = parser.parse_args(argv)
    if args.max_side is not None and args.max_side < 1:
        parser.error(f"--max-side takes a number of pixels >= 1, not {args.max_side}")
    try:
        count = write_image_pack(args.kb_dir, args.max_side)
    except (FileNotFoundError, UnreadableImageError) as err:
        # one image per entity: the pack cannot leave one out (the KB's prep gives an unreadable one a placeholder)
        print(f"ragym prep image-pack: {err}; rebuild the KB or replace the image", file=sys.stderr)
        return 2
    print(f"entities in={count} images packed={count} rejected=0")
    return 0
