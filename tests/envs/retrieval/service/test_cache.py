"""The replay cache: a finished search replays equal hits; a search in flight is joined; entries are kept as
wire bytes the garbage collector never walks, so a full cache does not stall the service."""

from __future__ import annotations

import asyncio
import gc

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.service.cache import ReplayCache, cache_key

HITS = [Hit("e1", 0.75, {"name": "Ginkgo", "image": "images/e1.png", "signature": None}), Hit("e2", -0.5, {})]


def test_a_finished_search_replays_equal_hits_and_a_pending_one_is_joined() -> None:
    async def run() -> None:
        cache = ReplayCache(size=4)
        key = cache_key("image", "a query", 2)
        assert cache.lookup(key) is None
        future = asyncio.get_running_loop().create_future()
        cache.start(key, future)
        assert cache.lookup(key) is future  # joined while in flight
        future.set_result(HITS)
        await asyncio.sleep(0)  # the done callback stores the entry
        assert cache.lookup(key) == HITS
        assert cache.stats.as_dict() == {"hits": 1, "joined": 1, "misses": 1, "hit_rate": 2 / 3}

    asyncio.run(run())


def test_entries_are_untracked_bytes_and_the_cache_stays_bounded() -> None:
    async def run() -> ReplayCache:
        cache = ReplayCache(size=100)
        for i in range(250):
            future = asyncio.get_running_loop().create_future()
            cache.start(cache_key("image", f"q{i}", 2), future)
            future.set_result([Hit(f"e{i}", float(i), {"name": f"entity {i}"}) for _ in range(10)])
        await asyncio.sleep(0)
        return cache

    cache = asyncio.run(run())
    assert len(cache) == 100
    entries = list(cache._done.values())
    assert all(isinstance(entry, bytes) and not gc.is_tracked(entry) for entry in entries)
    assert cache.lookup(cache_key("image", "q249", 2))[0] == Hit("e249", 249.0, {"name": "entity 249"})
    assert cache.lookup(cache_key("image", "q0", 2)) is None  # evicted, oldest first


def test_errors_are_not_cached() -> None:
    async def run() -> ReplayCache:
        cache = ReplayCache(size=4)
        future = asyncio.get_running_loop().create_future()
        cache.start(cache_key("image", "bad", 2), future)
        future.set_exception(RuntimeError("index failed"))
        await asyncio.sleep(0)
        return cache

    cache = asyncio.run(run())
    assert len(cache) == 0 and cache.lookup(cache_key("image", "bad", 2)) is None
