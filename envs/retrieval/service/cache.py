"""The replay cache: (retriever, normalised query, k) -> the encoded hit list, with in-flight requests shared.

The G episodes of one GRPO group often send the same query at nearly the same moment: the first one
starts the search, the others wait on its future instead of searching again. Finished results stay in a
bounded LRU, so evaluation and re-scoring replay identical hits. An entry is the hit list's wire bytes
(``wire.encode_hits``), which the service answers with as they are: one object the garbage collector never walks
(kept as hit objects, a full cache of 100,000 entries held millions of tracked objects, and the collector's full
passes over them stalled every request in flight: ``ragym serve`` on a 100k-entity KB, 64 clients, distinct
queries, p99 / p50 latency 4.0 with the cache on, 2.2 with it off), and a cached answer costs no decoding.
"""

from __future__ import annotations

import asyncio
import hashlib
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np


def normalise_query(query: str | np.ndarray) -> str | np.ndarray:
    """The form a query is searched and cached under: text NFKC-normalised with runs of whitespace
    collapsed; vectors as contiguous float32. Case is kept: dense encoders are case-sensitive."""
    if isinstance(query, str):
        return " ".join(unicodedata.normalize("NFKC", query).split())
    return np.ascontiguousarray(query, dtype=np.float32)


def cache_key(retriever: str, query: str | np.ndarray, k: int) -> tuple[str, str, int]:
    """Key of a normalised query: text as is, a vector by the digest of its bytes."""
    if isinstance(query, str):
        return retriever, "t:" + query, k
    return retriever, "v:" + hashlib.blake2b(query.tobytes(), digest_size=16).hexdigest(), k


@dataclass
class CacheStats:
    """Counters since the service started."""

    hits: int = 0
    """Answered from a finished entry."""
    joined: int = 0
    """Answered by joining a search already in flight for the same key."""
    misses: int = 0
    """Searched."""

    def as_dict(self) -> dict[str, Any]:
        """Counters and the hit rate ((hits + joined) / lookups)."""
        lookups = self.hits + self.joined + self.misses
        rate = (self.hits + self.joined) / lookups if lookups else 0.0
        return {"hits": self.hits, "joined": self.joined, "misses": self.misses, "hit_rate": rate}


class ReplayCache:
    """Bounded LRU of finished results (encoded hit lists) plus the futures of searches in flight (one event
    loop)."""

    def __init__(self, size: int):
        self.size = size
        self.stats = CacheStats()
        self._done: OrderedDict[tuple, bytes] = OrderedDict()
        self._pending: dict[tuple, asyncio.Future] = {}

    def lookup(self, key: tuple) -> bytes | asyncio.Future | None:
        """The finished entry, the future of a search in flight, or None (the caller searches and calls
        ``start``)."""
        if self.size == 0:
            self.stats.misses += 1
            return None
        if key in self._done:
            self._done.move_to_end(key)
            self.stats.hits += 1
            return self._done[key]
        if key in self._pending:
            self.stats.joined += 1
            return self._pending[key]
        self.stats.misses += 1
        return None

    def start(self, key: tuple, future: asyncio.Future) -> None:
        """Register a search in flight, whose result is its encoded hit list; the result is stored when it succeeds
        (errors are not cached)."""
        if self.size == 0:
            return
        self._pending[key] = future
        future.add_done_callback(lambda f: self._finish(key, f))

    def _finish(self, key: tuple, future: asyncio.Future) -> None:
        self._pending.pop(key, None)
        if future.cancelled() or future.exception() is not None:
            return
        self._done[key] = future.result()
        if len(self._done) > self.size:
            self._done.popitem(last=False)

    def __len__(self) -> int:
        return len(self._done)
