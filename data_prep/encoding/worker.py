"""One encoding worker: its config and the loop that turns shards of items into vector shards on disk.

``run_shards`` runs in the process that calls ``encode_items`` (``ragym.data_prep.encoding.pipeline``) or in
each Ray Data actor (``ragym.data_prep.encoding.ray_data``): the same code either way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ragym.data_prep.encoding import shards
from ragym.data_prep.encoding.encoders import ItemEncoder
from ragym.data_prep.encoding.items import EncodingError, Item

_END = object()


@dataclass(frozen=True)
class EncodeConfig:
    """How the stream is cut and how far CPU preparation runs ahead of the model."""

    shard_size: int = 4096
    """Items per shard (the unit of resumption and of Ray work); a multiple of ``batch_size``."""
    batch_size: int = 64
    """Items per forward pass."""
    prefetch: int = 4
    """Batches prepared ahead of the forward pass (bounds the memory of decoded images)."""
    num_workers: int = 1
    """Threads running ``preprocess`` (image decoding releases the GIL, so more threads help on big images)."""
    progress: bool = True
    """Show a tqdm bar (items/s and ETA)."""
    durable: bool = True
    """Flush each shard to disk before marking it finished (survives a machine crash, not only a kill)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.shard_size < 1 or self.shard_size % self.batch_size:
            raise ValueError(
                f"shard_size {self.shard_size} must be a positive multiple of batch_size {self.batch_size}"
            )
        if self.prefetch < 1 or self.num_workers < 1:
            raise ValueError("prefetch and num_workers must be at least 1")

    def layout(self) -> dict[str, int]:
        """What decides the bytes written (recorded in ``encoding.json``; prefetch and workers do not)."""
        return {"shard_size": self.shard_size, "batch_size": self.batch_size}


def _produce(
    work: Iterable[tuple[int, list[Item]]],
    encoder: ItemEncoder,
    cfg: EncodeConfig,
    pool: ThreadPoolExecutor,
    out: queue.Queue,
    stop: threading.Event,
) -> None:
    """Producer thread: submit each batch's ``preprocess`` and queue (shard, items, future, last-of-shard)."""
    try:
        for index, items in work:
            for start in range(0, len(items), cfg.batch_size):
                batch = items[start : start + cfg.batch_size]
                message = (
                    index,
                    batch,
                    pool.submit(encoder.preprocess, batch),
                    start + len(batch) == len(items),
                )
                while not stop.is_set():
                    try:
                        out.put(message, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        out.put(_END)
    except BaseException as err:  # handed to the consumer, which re-raises it with its traceback
        out.put(err)


def run_shards(
    work: Iterable[tuple[int, list[Item]]],
    encoder: ItemEncoder,
    root: Path,
    cfg: EncodeConfig,
    bar: tqdm | None = None,
) -> Iterator[tuple[int, int, int]]:
    """Encode and write each (index, items) shard of ``work``; yields (index, count, dim) as each is written."""
    pending: queue.Queue = queue.Queue(maxsize=cfg.prefetch)
    stop = threading.Event()
    with ThreadPoolExecutor(cfg.num_workers, thread_name_prefix="encode-prep") as pool:
        producer = threading.Thread(
            target=_produce, args=(work, encoder, cfg, pool, pending, stop), daemon=True, name="encode-read"
        )
        producer.start()
        ids: list[str] = []
        chunks: list[np.ndarray] = []
        try:
            while (message := pending.get()) is not _END:
                if isinstance(message, BaseException):
                    raise message
                index, batch, future, last = message
                vectors = encoder.forward(_result(future))  # (len(batch), dim)
                if vectors.ndim != 2 or vectors.shape[0] != len(batch):
                    raise EncodingError(
                        f"shard {index}: encoder returned {vectors.shape} for {len(batch)} items"
                    )
                ids.extend(item.id for item in batch)
                chunks.append(np.asarray(vectors, dtype=np.float32))
                if bar is not None:
                    bar.update(len(batch))
                if last:
                    shards.write_shard(root, index, ids, np.concatenate(chunks), cfg.durable)
                    yield index, len(ids), chunks[0].shape[1]
                    ids, chunks = [], []
        finally:
            stop.set()
            producer.join(timeout=5)


def _result(future: Future) -> Any:
    return future.result()
