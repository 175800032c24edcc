"""Dynamic batching and the replay cache, driven through the app's search (no HTTP)."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest

from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.cache import cache_key, normalise_query
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.service.wire import BadRequest, loads
from tests.envs.retrieval.service.helpers import Recording, random_faiss


def _app(retriever, **config) -> RetrievalApp:
    return RetrievalApp({"vec": Served(retriever, "vector", 16)}, ServiceConfig(**config))


async def _hits(app: RetrievalApp, query, k: int) -> list[dict]:
    """One query's hits as the service answers them: its encoded hit list, decoded."""
    (encoded,) = await app.search("vec", [query], k)
    assert isinstance(encoded, bytes)
    return loads(encoded)


async def _gather(app: RetrievalApp, queries, k: int):
    await app.start()
    return await asyncio.gather(*(_hits(app, q, k) for q in queries))


def test_concurrent_queries_are_coalesced_and_match_one_at_a_time() -> None:
    inner, vectors = random_faiss()
    recording = Recording(inner, delay_s=0.02)
    app = _app(recording, max_batch_size=8, max_wait_ms=20, cache_size=0)
    queries = list(vectors[:40] + 0.01)
    answers = asyncio.run(_gather(app, queries, 5))
    expected = [inner.search(q, 5) for q in queries]
    assert [[h["docid"] for h in a] for a in answers] == [[h.docid for h in e] for e in expected]
    # Scores agree to float32 rounding (a batch of 20+ goes through BLAS, one query through faiss's own loop).
    got = [h["score"] for a in answers for h in a]
    assert got == pytest.approx([h.score for e in expected for h in e], rel=1e-5)
    assert [[h["payload"] for h in a] for a in answers] == [[h.payload for h in e] for e in expected]
    sizes = [size for size, _ in recording.calls]
    assert sum(sizes) == 40 and max(sizes) <= 8
    assert len(sizes) <= 10, f"40 concurrent queries took {len(sizes)} index calls: {sizes}"


def test_each_k_gets_its_own_index_call_and_its_own_answer() -> None:
    inner, vectors = random_faiss()
    recording = Recording(inner)
    app = _app(recording, max_wait_ms=20, cache_size=0)

    async def run():
        await app.start()
        return await asyncio.gather(_hits(app, vectors[0], 3), _hits(app, vectors[0], 7))

    three, seven = asyncio.run(run())
    assert [h["docid"] for h in three] == [h.docid for h in inner.search(vectors[0], 3)]
    assert [h["docid"] for h in seven] == [h.docid for h in inner.search(vectors[0], 7)]
    assert sorted(recording.calls) == [(1, 3), (1, 7)]


def test_a_failing_batch_fails_its_requests_and_the_next_batch_works() -> None:
    inner, vectors = random_faiss()
    recording = Recording(inner)
    app = _app(recording, cache_size=0)

    async def run():
        await app.start()
        recording.fail_with = RuntimeError("index on fire")
        with pytest.raises(RuntimeError, match="index on fire"):
            await _hits(app, vectors[0], 2)
        recording.fail_with = None
        return await _hits(app, vectors[0], 2)

    assert [h["docid"] for h in asyncio.run(run())] == [h.docid for h in inner.search(vectors[0], 2)]


def test_cache_hits_misses_and_in_flight_joins() -> None:
    inner, vectors = random_faiss()
    recording = Recording(inner, delay_s=0.02)
    app = _app(recording, max_wait_ms=5)

    async def run():
        await app.start()
        group = await asyncio.gather(*(_hits(app, vectors[1], 4) for _ in range(8)))  # one GRPO group
        again = await _hits(app, vectors[1], 4)
        other_k = await _hits(app, vectors[1], 5)
        return group, again, other_k

    group, again, other_k = asyncio.run(run())
    assert all(g == group[0] for g in group) and again == group[0]
    assert sorted(recording.calls) == [(1, 4), (1, 5)]  # 8 + 1 queries for k=4 searched once
    stats = app.cache.stats
    assert (stats.misses, stats.joined, stats.hits) == (2, 7, 1)
    assert stats.as_dict()["hit_rate"] == pytest.approx(8 / 10)


def test_errors_are_not_cached() -> None:
    inner, vectors = random_faiss()
    recording = Recording(inner)
    app = _app(recording)

    async def run():
        await app.start()
        recording.fail_with = RuntimeError("transient")
        with pytest.raises(RuntimeError):
            await _hits(app, vectors[2], 2)
        recording.fail_with = None
        return await _hits(app, vectors[2], 2)

    assert len(asyncio.run(run())) == 2
    assert len(recording.calls) == 2


def test_the_same_vector_sent_to_two_retrievers_gets_each_ones_answer() -> None:
    """A KB serves its entities' image vectors and its passages' dense vectors side by side, often at one
    dimension: a vector's cache entry is its retriever's, or the second retriever answers with the first's hits."""
    from ragym.envs.retrieval.retrievers import FaissRetriever

    def retriever(prefix: str, seed: int) -> Recording:
        vectors = np.random.default_rng(seed).standard_normal((200, 16)).astype(np.float32)
        return Recording(
            FaissRetriever.from_vectors(vectors, [f"{prefix}{i}" for i in range(200)], lambda r: {})
        )

    image, passage = retriever("entity-", 0), retriever("passage-", 1)
    app = RetrievalApp(
        {"image": Served(image, "vector", 16), "passage": Served(passage, "vector", 16)},
        ServiceConfig(max_wait_ms=20),
    )
    query = np.random.default_rng(2).standard_normal(16).astype(np.float32)

    async def docids(name: str) -> list[str]:
        (encoded,) = await app.search(name, [query], 3)
        return [hit["docid"] for hit in loads(encoded)]

    async def run() -> tuple[list[list[str]], list[list[str]]]:
        await app.start()
        # The second in flight as the first is searched (joined), then both finished (from the cache).
        together = await asyncio.gather(docids("image"), docids("passage"))
        one_after_the_other = [await docids("image"), await docids("passage")]
        return list(together), one_after_the_other

    together, cached = asyncio.run(run())
    expected = [[h.docid for h in r.inner.search(query, 3)] for r in (image, passage)]
    assert expected[0][0].startswith("entity-") and expected[1][0].startswith("passage-")
    assert together == cached == expected
    assert len(image.calls) == len(passage.calls) == 1  # each searched once; the repeats came from the cache


def test_text_queries_are_normalised_before_search_and_caching() -> None:
    assert normalise_query("  who  built\tthe\n bridge ") == "who built the bridge"
    assert normalise_query("ﬁre") == "fire"  # NFKC folds the ligature
    assert cache_key("bm25", "a b", 3) != cache_key("bm25", "a b", 4)
    v = np.ones(4, dtype=np.float64)
    assert cache_key("v", normalise_query(v), 3) == cache_key("v", normalise_query(v.astype(np.float32)), 3)


@pytest.mark.parametrize(
    ("query", "k", "status"),
    [(np.zeros(8, dtype=np.float32), 3, 422), ("text", 3, 422), (np.zeros(16, dtype=np.float32), 0, 422)],
)
def test_bad_queries_are_refused(query, k: int, status: int) -> None:
    inner, _ = random_faiss()
    app = _app(inner)

    async def run():
        await app.start()
        await _hits(app, query, k)

    with pytest.raises(BadRequest) as error:
        asyncio.run(run())
    assert error.value.status == status


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        ServiceConfig(max_batch_size=0)
    with pytest.raises(ValueError, match="token"):
        ServiceConfig(token="")


def test_a_full_batch_is_split_into_chunks_only_when_asked() -> None:
    inner, vectors = random_faiss()
    queries = list(vectors[:64] + 0.01)
    expected = [[h.docid for h in inner.search(q, 3)] for q in queries]
    # 4 splits of 64 queries: chunks keep >= 24 queries, so 2 chunks at most.
    for splits, chunks in ((1, [64]), (2, [32, 32]), (4, [32, 32])):
        recording = Recording(inner, delay_s=0.05)
        app = _app(recording, max_batch_size=64, max_wait_ms=200, cache_size=0, batch_splits=splits)
        answers = asyncio.run(_gather(app, queries, 3))
        assert [[h["docid"] for h in a] for a in answers] == expected  # every query keeps its own hits
        assert sorted(size for size, _ in recording.calls) == chunks
    with pytest.raises(ValueError, match="batch_splits must be >= 1"):
        ServiceConfig(batch_splits=0)


def test_the_index_busy_time_counts_the_index_calls() -> None:
    inner, vectors = random_faiss()
    app = _app(Recording(inner, delay_s=0.05), cache_size=0, max_wait_ms=0)

    async def run():
        await app.start()
        for vector in vectors[:3]:
            await _hits(app, vector, 2)

    asyncio.run(run())
    stats = app.status()["batches"]["vec"]
    assert stats["batches"] == 3
    assert 0.15 <= stats["busy_s"] < 3.0  # three calls of at least 50 ms each, not the time between them


@pytest.mark.parametrize("freeze", [True, False])
def test_loaded_indexes_leave_the_garbage_collectors_passes(freeze: bool) -> None:
    inner, _ = random_faiss()
    app = _app(inner, gc_freeze=freeze)
    gc.unfreeze()
    try:
        asyncio.run(app.start())
        tracked = {id(o) for o in gc.get_objects()}
        # frozen objects are in the permanent generation, which collections (and gc.get_objects) skip
        assert (id(app.retrievers["vec"]) in tracked) is not freeze
        assert (gc.get_freeze_count() > 0) is freeze
    finally:
        gc.unfreeze()
