"""The async-rollouts benchmark's delaying proxy (``benchmarks/latency_proxy.py``) on 127.0.0.1: bytes pass both
ways unchanged, a search waits its drawn delay and is counted, other routes neither."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import pytest

from benchmarks.latency_proxy import DelayingProxy, Latency
from tests.loopback import loopback_server

BODY = b'{"retriever": "bm25", "queries": ["caf\xc3\xa9 \\u00e9"], "k": 3}\x00\xff'
"""A request body with bytes a re-encoding would change."""


class Upstream(BaseHTTPRequestHandler):
    """Records each request (method, path, body, a custom header) and answers its body reversed, status 201."""

    protocol_version = "HTTP/1.1"
    received: list[tuple[str, str, bytes, str | None]] = []

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.received.append((self.command, self.path, body, self.headers.get("X-Probe")))
        self.send_response(201)
        self.send_header("Content-Type", "application/x-probe")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[::-1])

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    Upstream.received = []
    with loopback_server(Upstream) as url:
        yield url


def request(url: str, method: str, path: str, body: bytes | None, conn=None) -> tuple[int, str, bytes, float]:
    parts = urlsplit(url)
    conn = conn or http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    start = time.perf_counter()
    conn.request(method, path, body=body, headers={"X-Probe": "p1", "Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    return response.status, response.getheader("Content-Type"), data, time.perf_counter() - start


def test_bytes_pass_unchanged_and_a_search_waits_its_delay(upstream: str) -> None:
    with DelayingProxy(upstream, Latency(0.3, seed=0)) as proxy:
        status, kind, data, took = request(proxy.url, "POST", "/batch_search", BODY)
        assert (status, kind, data) == (201, "application/x-probe", BODY[::-1])
        assert Upstream.received == [("POST", "/batch_search", BODY, "p1")]
        assert took >= 0.3
        assert (proxy.latency.num_searches, proxy.latency.injected_s) == (1, pytest.approx(0.3))


def test_ready_is_neither_delayed_nor_counted(upstream: str) -> None:
    with DelayingProxy(upstream, Latency(2.0, seed=0)) as proxy:
        status, _, data, took = request(proxy.url, "GET", "/ready", None)
        assert (status, data, Upstream.received[0][:3]) == (201, b"", ("GET", "/ready", b""))
        assert took < 1.5 and proxy.latency.num_searches == 0


def test_keep_alive_connection_carries_several_searches(upstream: str) -> None:
    with DelayingProxy(upstream, Latency(0.0, seed=0)) as proxy:
        parts = urlsplit(proxy.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        for i in range(3):
            assert request(proxy.url, "POST", "/search", b"q%d" % i, conn)[2] == (b"q%d" % i)[::-1]
        assert [r[2] for r in Upstream.received] == [b"q0", b"q1", b"q2"]
        assert proxy.latency.num_searches == 3


def test_heavy_tail_draws_are_seeded_and_a_share_is_slow() -> None:
    draws = [Latency(0.1, slow_share=0.25, slow_factor=20.0, seed=3) for _ in range(2)]
    first, second = ([d.draw() for _ in range(400)] for d in draws)
    assert first == second  # the same seed, the same latencies
    assert set(first) == {0.1, 0.1 * 20.0}
    assert 0.15 < first.count(0.1 * 20.0) / 400 < 0.35  # 25% slow, within sampling noise (sd ~2%)
    assert draws[0].injected_s == pytest.approx(sum(first))


@pytest.mark.parametrize("args", [(-0.1, 0.0, 1.0), (0.1, 1.5, 1.0), (0.1, 0.1, 0.5)])
def test_bad_latency_is_refused(args: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="latency needs"):
        Latency(*args)


def test_dead_upstream_is_a_502() -> None:
    with DelayingProxy("http://127.0.0.1:9", Latency(0.0)) as proxy:
        assert request(proxy.url, "POST", "/search", b"q")[0] == 502


def test_the_service_client_gets_the_services_hits_through_the_proxy() -> None:
    """ragym's own client and service on either side (the benchmark's path): the same hits as searching in process,
    from several threads (one keep-alive connection each), every search counted."""
    from ragym.envs.retrieval.service.app import RetrievalApp, Served
    from ragym.envs.retrieval.service.client import ServiceRetriever
    from ragym.envs.retrieval.service.config import ServiceConfig
    from tests.envs.retrieval.service.helpers import ids, random_faiss, running

    inner, vectors = random_faiss()
    app = RetrievalApp({"vec": Served(inner, "vector", 16)}, ServiceConfig(cache_size=0, max_wait_ms=0))
    with running(app) as service, DelayingProxy(service, Latency(0.05, seed=0)) as proxy:
        client = ServiceRetriever(proxy.url, "vec")
        assert client.ready()
        results: dict[int, list] = {}

        def search(i: int) -> None:
            results[i] = client.batch_search([vectors[i], vectors[i + 1]], 3)

        threads = [threading.Thread(target=search, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert {i: ids(r) for i, r in results.items()} == {
        i: ids(inner.batch_search([vectors[i], vectors[i + 1]], 3)) for i in range(4)
    }
    assert proxy.latency.num_searches == 4
