"""A deterministic, deliberately slow ``ItemEncoder`` for the encoding-step tests (killable mid-run)."""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from ragym.data_prep.encoding import EncodeConfig, Item, encode_items

DIM = 8


class HashEncoder:
    """Vectors from a hash of each item's text; ``delay_s`` per forward pass makes a run last long enough."""

    name = "hash"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def preprocess(self, items: list[Item]) -> list[bytes]:
        """The hash of each text."""
        return [hashlib.sha256((i.text or "").encode()).digest() for i in items]

    def forward(self, batch: list[bytes]) -> np.ndarray:
        """(n, DIM) float32 from the hash bytes."""
        time.sleep(self.delay_s)
        return (
            np.frombuffer(b"".join(batch), dtype=np.uint8).reshape(len(batch), 32)[:, :DIM].astype(np.float32)
        )


def items(num: int) -> list[Item]:
    """``num`` text items with distinct ids."""
    return [Item(f"doc-{i}", f"text of document {i}") for i in range(num)]


def run(out: str, num: int, delay_s: float) -> None:
    """What the killed subprocess runs."""
    encode_items(items(num), HashEncoder(delay_s), Path(out), EncodeConfig(shard_size=8, batch_size=4))


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))


class TableEncoder:
    """Hands out precomputed rows: item ``v<i>`` gets row i of ``table`` (puts known vectors into shards)."""

    name = "table"

    def __init__(self, table: np.ndarray) -> None:
        self.table = table

    def preprocess(self, items: list[Item]) -> list[int]:
        """Row numbers from the ids."""
        return [int(i.id[1:]) for i in items]

    def forward(self, rows: list[int]) -> np.ndarray:
        """The rows."""
        return self.table[rows]


def encode_table(table: np.ndarray, out: Path, shard_size: int = 1000) -> Path:
    """Shards under ``out`` holding ``table`` row by row (ids ``v0``, ``v1``...)."""
    rows = [Item(f"v{i}", "row") for i in range(len(table))]
    encode_items(
        rows, TableEncoder(table), out, EncodeConfig(shard_size=shard_size, batch_size=250, progress=False)
    )
    return out
