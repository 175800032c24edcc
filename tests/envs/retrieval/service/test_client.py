"""The client's timeouts, retries with backoff and circuit breaker against stalling, erroring and dead servers."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

import pytest

from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.client import (
    CircuitBreaker,
    ClientConfig,
    RetrievalUnavailable,
    ServiceRetriever,
)
from ragym.envs.retrieval.service.config import ServiceConfig
from tests.envs.retrieval.service.helpers import Recording, free_port, random_faiss, running
from tests.loopback import loopback_server

FAST = ClientConfig(timeout_s=0.3, max_retries=2, backoff_s=0.01, failure_threshold=2, reset_after_s=0.3)


def _served(recording: Recording) -> RetrievalApp:
    return RetrievalApp({"vec": Served(recording, "vector", 16)}, ServiceConfig(cache_size=0, max_wait_ms=0))


def _wait_ready(client: ServiceRetriever) -> None:
    deadline = time.monotonic() + 20
    while not client.ready():
        assert time.monotonic() < deadline, "service never became ready"
        time.sleep(0.02)


def test_a_stalling_server_times_out_after_bounded_retries() -> None:
    inner, vectors = random_faiss()
    recording = Recording(inner)
    with running(_served(recording)) as url:
        client = ServiceRetriever(url, "vec", FAST)
        _wait_ready(client)
        recording.release.clear()  # the index hangs
        start = time.monotonic()
        with pytest.raises(RetrievalUnavailable) as error:
            client.search(vectors[0], 3)
        elapsed = time.monotonic() - start
        recording.release.set()
    assert error.value.reason == "timeout"
    assert elapsed < 3 * 0.3 + 1.0  # three attempts of 0.3 s plus backoff, not a hang
    assert sum(size for size, _ in recording.calls) == 3  # every attempt reached the server


def test_an_erroring_server_is_retried_then_reported() -> None:
    inner, vectors = random_faiss()
    recording = Recording(inner)
    with running(_served(recording)) as url:
        client = ServiceRetriever(url, "vec", FAST)
        _wait_ready(client)
        recording.fail_with = RuntimeError("disk gone")
        with pytest.raises(RetrievalUnavailable, match="500.*disk gone") as error:
            client.search(vectors[0], 3)
        assert error.value.reason == "server_error" and len(recording.calls) == 3
        recording.fail_with = None
        assert [h.docid for h in client.search(vectors[0], 3)] == [
            h.docid for h in inner.search(vectors[0], 3)
        ]


def test_a_dead_server_opens_the_breaker_which_recovers_when_it_returns() -> None:
    inner, vectors = random_faiss()
    port = free_port()
    client = ServiceRetriever(f"http://127.0.0.1:{port}", "vec", FAST)
    for _ in range(FAST.failure_threshold):
        with pytest.raises(RetrievalUnavailable) as error:
            client.search(vectors[0], 3)
        assert error.value.reason == "connection"
    assert client.breaker.state == "open"
    start = time.monotonic()
    with pytest.raises(RetrievalUnavailable) as error:
        client.search(vectors[0], 3)
    assert error.value.reason == "circuit_open" and time.monotonic() - start < 0.05  # fails fast
    recording = Recording(inner)
    with running(_served(recording), port=port):
        deadline = time.monotonic() + 10
        while client.breaker.state == "open":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        _wait_ready(client)
        hits = client.search(vectors[0], 3)  # the half-open probe succeeds and closes the breaker
    assert [h.docid for h in hits] == [h.docid for h in inner.search(vectors[0], 3)]
    assert client.breaker.state == "closed"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"results": [[{"docid"', "expected 1 hit lists"),  # cut off: not JSON
        (b"", "expected 1 hit lists"),
        (b"[1, 2]", "expected 1 hit lists"),
        (b'{"hits": []}', "expected 1 hit lists"),
        (b'{"results": []}', "expected 1 hit lists"),  # no list for the query: not "no hits"
        (b'{"results": [[{"id": "a"}]]}', "a hit is not"),
        (b'{"results": [[{"docid": "a", "score": null, "payload": {}}]]}', "a hit is not"),
    ],
)
def test_a_garbled_answer_is_a_server_error_retried_and_counted(body: bytes, why: str) -> None:
    calls = []

    class Garbled(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            calls.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with loopback_server(Garbled) as url:
        client = ServiceRetriever(url, "vec", FAST)
        with pytest.raises(RetrievalUnavailable, match=f"answered 200 with no usable answer: {why}") as error:
            client.search("q", 3)
    assert error.value.reason == "server_error" and len(calls) == FAST.max_retries + 1
    assert client.breaker.failures == 1


def test_breaker_states_follow_failures_and_the_clock() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=3, reset_after_s=10, clock=lambda: now[0])
    for _ in range(2):
        assert breaker.allow()
        breaker.record(False)
    assert breaker.state == "closed"
    breaker.record(False)
    assert breaker.state == "open" and not breaker.allow()
    now[0] = 10.0
    assert breaker.state == "half_open"
    assert breaker.allow() and not breaker.allow()  # one probe at a time
    breaker.record(False)  # the probe failed: open again for another cool-down
    assert breaker.state == "open"
    now[0] = 20.0
    assert breaker.allow()
    breaker.record(True)
    assert breaker.state == "closed" and breaker.failures == 0


def test_bad_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        ServiceRetriever("https://example.org:1", "vec")


def test_async_search_from_an_event_loop_matches_sync() -> None:
    import asyncio

    inner, vectors = random_faiss()
    with running(_served(Recording(inner))) as url:
        client = ServiceRetriever(url, "vec", FAST)
        _wait_ready(client)

        async def many():
            return await asyncio.gather(*(client.abatch_search([v], 3) for v in vectors[:6]))

        results = asyncio.run(many())
    assert [[h.docid for h in r[0]] for r in results] == [
        [h.docid for h in inner.search(v, 3)] for v in vectors[:6]
    ]
