"""The replay cache: a finished search replays the same encoded hits; a search in flight is joined; entries are
wire bytes the garbage collector never walks, so a full cache does not stall the service."""

from __future__ import annotations

import asyncio
import gc

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.service.cache import ReplayCache, cache_key
from ragym.envs.retrieval.service.wire import encode_hits, hits_from_json, loads, results_body

HITS = [Hit("e1", 0.75, {"name": "Ginkgo", "image": "images/e1.png", "signature": None}), Hit("e2", -0.5, {})]


def test_a_finished_search_replays_equal_hits_and_a_pending_one_is_joined() -> None:
    async def run() -> None:
        cache = ReplayCache(size=4)
        key = cache_key("image", "a query", 2)
        assert cache.lookup(key) is None
        future = asyncio.get_running_loop().create_future()
        cache.start(key, future)
        assert cache.lookup(key) is future  # joined while in flight
        future.set_result(encode_hits(HITS))
        await asyncio.sleep(0)  # the done callback stores the entry
        assert hits_from_json(loads(cache.lookup(key))) == HITS
        assert cache.stats.as_dict() == {"hits": 1, "joined": 1, "misses": 1, "hit_rate": 2 / 3}

    asyncio.run(run())


def test_entries_are_untracked_bytes_and_the_cache_stays_bounded() -> None:
    async def run() -> ReplayCache:
        cache = ReplayCache(size=100)
        for i in range(250):
            future = asyncio.get_running_loop().create_future()
            cache.start(cache_key("image", f"q{i}", 2), future)
            future.set_result(
                encode_hits([Hit(f"e{i}", float(i), {"name": f"entity {i}"}) for _ in range(10)])
            )
        await asyncio.sleep(0)
        return cache

    cache = asyncio.run(run())
    assert len(cache) == 100
    entries = list(cache._done.values())
    assert all(isinstance(entry, bytes) and not gc.is_tracked(entry) for entry in entries)
    assert hits_from_json(loads(cache.lookup(cache_key("image", "q249", 2))))[0] == Hit(
        "e249", 249.0, {"name": "entity 249"}
    )
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


def test_a_hit_list_is_encoded_as_the_wire_format_and_answers_are_assembled_from_the_bytes() -> None:
    encoded = encode_hits(HITS)
    assert loads(encoded) == [
        {
            "docid": "e1",
            "score": 0.75,
            "payload": {"name": "Ginkgo", "image": "images/e1.png", "signature": None},
        },
        {"docid": "e2", "score": -0.5, "payload": {}},
    ]
    assert loads(results_body(True, [encoded])) == {"hits": loads(encoded)}
    assert loads(results_body(False, [encoded, encode_hits([])])) == {"results": [loads(encoded), []]}
