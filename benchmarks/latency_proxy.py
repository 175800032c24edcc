"""A loopback HTTP proxy that holds every search request for a drawn latency before it reaches ``ragym serve``.

``benchmarks/async_rollouts.py`` puts one in front of the retrieval service and gives the recipe its address
(``ragym.retrieval.url``), so a search is slow wherever the env that sends it runs: in the local engine's process
or in one of verl's agent-loop workers. Request and response bytes pass unchanged; only ``/search`` and
``/batch_search`` wait (``/ready`` and ``/health`` do not), and each wait is one seeded draw, counted.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOST = "127.0.0.1"
SEARCH_PATHS = ("/search", "/batch_search")
"""The service's search routes: the requests a slow service would hold."""
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection"}
"""Headers that belong to one connection, not to the request: the proxy sets its own."""


class Latency:
    """Seeded draws of a search's delay: ``base_s``, and ``slow_factor`` x that for a ``slow_share`` of searches;
    counts the searches and the seconds drawn.

    >>> latency = Latency(0.1, slow_share=0.0, slow_factor=20.0, seed=0)
    >>> latency.draw(), latency.num_searches
    (0.1, 1)
    """

    def __init__(self, base_s: float = 0.0, slow_share: float = 0.0, slow_factor: float = 1.0, seed: int = 0):
        if base_s < 0 or not 0 <= slow_share <= 1 or slow_factor < 1:
            raise ValueError(
                f"latency needs base_s >= 0, 0 <= slow_share <= 1, slow_factor >= 1; got "
                f"{base_s}, {slow_share}, {slow_factor}"
            )
        self.base_s, self.slow_share, self.slow_factor = base_s, slow_share, slow_factor
        self.rng, self.lock = random.Random(seed), threading.Lock()
        self.num_searches, self.injected_s = 0, 0.0

    def draw(self) -> float:
        """One search's delay (seconds)."""
        with self.lock:
            slow = self.rng.random() < self.slow_share
            delay = self.base_s * (self.slow_factor if slow else 1.0)
            self.num_searches += 1
            self.injected_s += delay
        return delay


class DelayingProxy:
    """Forwards every request to ``upstream`` (``http://host:port``) from a free port on 127.0.0.1, a search
    after ``latency.draw()`` seconds; ``url`` is its address. Set ``latency`` between runs (a fresh draw)."""

    def __init__(self, upstream: str, latency: Latency | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.latency = latency or Latency()
        self.server = ThreadingHTTPServer((HOST, 0), _handler(self, parts.hostname, parts.port))
        self.server.daemon_threads = True
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> DelayingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(proxy: DelayingProxy, host: str, port: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the service's client holds one connection per thread
        upstream: http.client.HTTPConnection | None = None

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path.split("?")[0] in SEARCH_PATHS:
                time.sleep(proxy.latency.draw())
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(host, port, timeout=600)
            try:
                self.upstream.request(self.command, self.path, body=body or None, headers=headers)
                response = self.upstream.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                self.upstream.close()
                self.upstream = None
                self.send_error(502, "the upstream service did not answer")
                return
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP and key.lower() not in ("server", "date"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet: a benchmark's output is its figures."""

    return Handler
