"""A least-recently-used cache bounded in bytes, not entries: images differ in size by orders of magnitude.

A cache bounded by count holds 0.6 GB of 56 x 56 images or hundreds of GB of photographs in the same
65,536 slots; bounded in bytes, a process's memory stops growing once the cache is full, whatever the
images are.

>>> cache = ByteLRU(max_bytes=100)
>>> cache.get_or_compute("a", lambda: b"x" * 60, len)
b'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'
>>> _ = cache.get_or_compute("b", lambda: b"y" * 60, len)  # evicts "a"
>>> cache.num_entries, cache.num_bytes, cache.num_evictions
(1, 60, 1)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByteLRU(Generic[V]):
    """Values by key, the least recently used evicted first once their sizes sum past ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = _checked(max_bytes)
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()  # env steps run in executor threads
        self.num_bytes = 0
        self.num_hits = self.num_misses = self.num_evictions = 0

    @property
    def num_entries(self) -> int:
        """Values held now."""
        return len(self._entries)

    def get_or_compute(self, key: Hashable, compute: Callable[[], V], size: Callable[[V], int]) -> V:
        """The value cached under ``key``, else ``compute()`` stored (unless alone it exceeds the budget)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.num_hits += 1
                return entry[0]
            self.num_misses += 1
        value = compute()  # outside the lock: decoding is slow, and two threads computing one key is harmless
        num_bytes = int(size(value))
        with self._lock:
            if key in self._entries or num_bytes > self.max_bytes:
                return value
            self._entries[key] = (value, num_bytes)
            self.num_bytes += num_bytes
            self._evict()
        return value

    def get(self, key: Hashable) -> V | None:
        """The value cached under ``key`` (now the most recently used), else None; computes nothing."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            self.num_hits += 1
            return entry[0]

    def put(self, key: Hashable, value: V, num_bytes: int) -> None:
        """Store ``value`` under ``key``, replacing what was there (unless alone it exceeds the budget)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.num_bytes -= old[1]
            if num_bytes > self.max_bytes:
                return
            self._entries[key] = (value, num_bytes)
            self.num_bytes += num_bytes
            self._evict()

    def clear(self) -> None:
        """Forget every value (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self.num_bytes = 0

    def resize(self, max_bytes: int) -> None:
        """Set a new budget, evicting down to it now."""
        with self._lock:
            self.max_bytes = _checked(max_bytes)
            self._evict()

    def _evict(self) -> None:
        """Drop the least recently used values until the rest fit (the caller holds the lock)."""
        while self.num_bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.num_bytes -= evicted
            self.num_evictions += 1


def _checked(max_bytes: int) -> int:
    """``max_bytes`` if it is an int >= 0, else a clear error."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"a cache's max_bytes must be an int >= 0, got {max_bytes!r}")
    return max_bytes
