"""What the encoding step reads: items (an id plus text and/or an image path), from memory or a file."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ragym.envs.files import read_jsonl
from ragym.envs.image_cache import rgb_pixels


class EncodingError(ValueError):
    """Bad input to the encoding step, naming the item, shard or file."""


@dataclass(frozen=True)
class Item:
    """One thing to embed: a KB entity (image + title), a passage, a document page."""

    id: str
    """Unique id, stored next to the vector (row i of the shards is the i-th item of the stream)."""
    text: str | None = None
    """Passage, title or page text; None when the encoder reads only the image."""
    image: str | None = None
    """Path of the image file; None when the encoder reads only the text."""

    def check(self) -> Item:
        """Self, after checking the id can be stored one per line and something is there to encode."""
        if not isinstance(self.id, str) or not self.id or "\n" in self.id or "\r" in self.id:
            raise EncodingError(f"item id {self.id!r} must be a non-empty one-line string")
        if self.text is None and self.image is None:
            raise EncodingError(f"item {self.id!r} has neither text nor image")
        return self

    def to_json(self) -> str:
        """One JSON line (the ``--items`` file format and what Ray actors receive)."""
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Item:
        """Parse one JSON line written by ``to_json`` (unknown keys are an error, not ignored)."""
        return cls.from_record(json.loads(line))

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Item:
        """The item of one parsed ``{"id", "text", "image"}`` object (unknown keys are an error)."""
        if not isinstance(record, dict):
            raise TypeError(f"expected a JSON object, got {type(record).__name__}")
        unknown = set(record) - {"id", "text", "image"}
        if unknown:
            raise EncodingError(f"item {record.get('id')!r} has unknown fields {sorted(unknown)}")
        return cls(**record)


def read_items(path: Path) -> Iterator[Item]:
    """Items from a JSON-lines file (``{"id", "text", "image"}`` per line); image paths relative to it."""
    base = path.parent
    for number, record in read_jsonl(path):
        try:
            item = Item.from_record(record)
        except TypeError as err:
            raise EncodingError(f"{path}:{number}: not an item: {err}") from err
        if item.image is not None and not Path(item.image).is_absolute():
            item = Item(item.id, item.text, str(base / item.image))
        yield item


def write_items(path: Path, items: Iterable[Item]) -> int:
    """Write items as JSON lines; returns how many."""
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for item in items:
            f.write(item.check().to_json() + "\n")
            count += 1
    return count


def load_image(item: Item) -> np.ndarray:
    """The item's image as uint8 (H, W, 3); a missing or unreadable file names the item."""
    if item.image is None:
        raise EncodingError(f"item {item.id!r} has no image but the encoder reads images")
    try:
        with Image.open(item.image) as image:
            return rgb_pixels(image)
    except OSError as err:
        raise EncodingError(f"item {item.id!r}: cannot read image {item.image}: {err}") from err


def item_text(item: Item) -> str:
    """The item's text; an item without one names itself."""
    if item.text is None:
        raise EncodingError(f"item {item.id!r} has no text but the encoder reads text")
    return item.text
