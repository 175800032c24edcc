"""The env's retriever over the service: timeouts, bounded retries with backoff, and a circuit breaker.

``ServiceRetriever(url, name)`` has the ``Retriever`` interface (``search`` / ``batch_search`` returning
``Hit`` lists), so an env swaps it in for an in-process retriever. A request that times out, cannot
connect, gets a 5xx, or gets an answer that is not the route's (not JSON, another shape, another number of hit
lists than queries) is retried ``max_retries`` times with exponential backoff; if it still fails the
call raises ``RetrievalUnavailable`` (the env turns that into an observation and a ``retrieval_error``
event). After ``failure_threshold`` failed calls in a row the breaker opens: calls fail at once for
``reset_after_s`` instead of each waiting out its timeouts, then one probe call is let through, and a
success closes the breaker again. A 4xx is the caller's bug and raises ``RetrievalRequestError`` at once.
An encoder swap (``swap_encoder``) is one attempt with its own, longer timeout: under Ray Serve it waits for every
replica, and one that some replicas did not take raises ``EncoderSwapIncomplete``.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.service.wire import dumps, encode_query, hits_from_json, loads


class RetrievalUnavailable(RuntimeError):
    """The service could not answer (down, stalled, failing, or the breaker is open)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"retrieval unavailable ({reason}): {detail}")
        self.reason = reason
        """``timeout``, ``connection``, ``server_error`` or ``circuit_open``."""
        self.detail = detail


class RetrievalRequestError(ValueError):
    """The service refused the request as sent (4xx): a bug on the calling side, never retried."""


class EncoderSwapIncomplete(RuntimeError):
    """An encoder swap that not every replica of a Ray Serve deployment holds (``ragym.envs.serving.encoder_sync``):
    those that do serve the new version, the others still the one before until they apply it."""

    def __init__(self, message: str, answer: dict[str, Any]):
        super().__init__(message)
        self.answer = answer
        """The service's answer: ``version``, ``previous``, ``replicas`` ({"holding", "live", "errors"})."""
        self.holding: int = answer["replicas"]["holding"]
        """Replicas that hold the new version."""
        self.live: int = answer["replicas"]["live"]
        """Replicas Serve runs."""


@dataclass(frozen=True)
class ClientConfig:
    """How long and how often the client tries before it reports the service unavailable."""

    timeout_s: float = 10.0
    """Socket timeout of one attempt (connect, and each read)."""
    max_retries: int = 2
    """Further attempts after the first fails (so at most ``max_retries + 1`` per call)."""
    backoff_s: float = 0.2
    """Wait before the first retry; doubles on each further retry."""
    backoff_max_s: float = 2.0
    """Longest wait between two attempts."""
    failure_threshold: int = 3
    """Failed calls in a row that open the breaker."""
    reset_after_s: float = 5.0
    """How long an open breaker fails calls at once before letting one probe through."""
    token: str | None = None
    """Bearer token, when the service requires one."""
    swap_timeout_s: float = 120.0
    """Socket timeout of an encoder swap (``swap_encoder``): it loads the version and, under Ray Serve, waits for
    every replica to hold it (``ragym.envs.serving.encoder_sync.SyncSettings.wait_s``, 60 s by default)."""


class CircuitBreaker:
    """Closed -> open after N failures in a row -> half-open after a cool-down -> closed on a success."""

    def __init__(self, failure_threshold: int, reset_after_s: float, clock=time.monotonic):
        self.failure_threshold = failure_threshold
        self.reset_after_s = reset_after_s
        self.clock = clock
        self.failures = 0
        self.opened_at: float | None = None
        self._probing = False
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open``."""
        if self.opened_at is None:
            return "closed"
        return "half_open" if self.clock() - self.opened_at >= self.reset_after_s else "open"

    def allow(self) -> bool:
        """Whether a call may go out now (in half-open state, only one probe at a time)."""
        with self._lock:
            state = self.state
            if state == "closed":
                return True
            if state == "half_open" and not self._probing:
                self._probing = True
                return True
            return False

    def record(self, ok: bool) -> None:
        """Count a finished call."""
        with self._lock:
            self._probing = False
            if ok:
                self.failures, self.opened_at = 0, None
                return
            self.failures += 1
            if self.failures >= self.failure_threshold or self.opened_at is not None:
                self.opened_at = self.clock()


def unreachable(where: str, exc: BaseException, timeout_s: float) -> RetrievalUnavailable:
    """A request to ``where`` that got no answer: ``timeout`` when it waited ``timeout_s`` in vain, else
    ``connection`` (refused, reset, a broken response)."""
    if isinstance(exc, TimeoutError):
        return RetrievalUnavailable("timeout", f"{where}: no answer in {timeout_s} s ({exc})")
    return RetrievalUnavailable("connection", f"{where}: {type(exc).__name__}: {exc}")


class ServiceRetriever:
    """One named retriever of the service, with the ``Retriever`` interface."""

    def __init__(self, url: str, name: str, config: ClientConfig | None = None):
        config = config or ClientConfig()
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"retrieval service URL must be http://host:port, got {url!r}")
        self.url, self.name, self.config = url, name, config
        self._host, self._port = parts.hostname, parts.port or 80
        self.breaker = CircuitBreaker(config.failure_threshold, config.reset_after_s)
        self._local = threading.local()  # one keep-alive connection per thread (env steps run in a pool)

    def search(self, query: Any, k: int) -> list[Hit]:
        """Top-k hits for one query (a string, or a numpy vector for vector retrievers)."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        """Top-k hits per query, in one request."""
        body = {"retriever": self.name, "queries": [encode_query(q) for q in queries], "k": k}
        return self.call("POST", "/batch_search", body, lambda data: read_results(data, len(queries)))

    async def abatch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        """``batch_search`` from async code, without blocking the event loop."""
        return await asyncio.to_thread(self.batch_search, queries, k)

    def swap_encoder(self, path: str) -> dict[str, Any]:
        """Ask the service to load the query-encoder version at ``path`` (a folder on its machine) and serve this
        retriever's searches through it (``POST /encoder``); returns ``{"version", "previous"}``, under Ray Serve with
        ``"replicas"`` ({"holding", "live", "errors"}). A swap some replicas did not take raises
        ``EncoderSwapIncomplete``; the swap is not retried (one whose answer was lost may have happened)."""
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self.config.swap_timeout_s)
        try:
            status, data = self._exchange(
                conn, "POST", "/encoder", {"retriever": self.name, "path": str(path)}
            )
        except (OSError, http.client.HTTPException) as exc:
            raise unreachable(f"{self.url}/encoder", exc, self.config.swap_timeout_s) from exc
        finally:
            conn.close()
        if status < 400:
            if isinstance(data, dict) and isinstance(data.get("version"), str):
                return data
            # a proxy's page or another route's answer: the swap cannot be taken as done
            raise RetrievalUnavailable(
                "server_error", f"{self.url}/encoder answered {status} without a version: {str(data)[:200]}"
            )
        message = f"{self.url}/encoder answered {status}: {data.get('error', data) if isinstance(data, dict) else data}"
        if isinstance(data, dict) and "replicas" in data:
            raise EncoderSwapIncomplete(message, data)
        if status < 500:
            raise RetrievalRequestError(message)
        raise RetrievalUnavailable("server_error", message)

    def ready(self) -> bool:
        """Whether the service answers ``/ready`` with 200 (one attempt, no retries, breaker untouched)."""
        try:
            status, _ = self._request("GET", "/ready", None)
        except (OSError, http.client.HTTPException):
            return False
        return status == 200

    def call(self, method: str, path: str, body: Any, read: Callable[[Any], Any] = lambda data: data) -> Any:
        """One call with retries and the breaker; JSON in, ``read`` of the JSON out (a ``ValueError`` from ``read``:
        an answer the client cannot use, a server error)."""
        if not self.breaker.allow():
            raise RetrievalUnavailable(
                "circuit_open", f"{self.url} failed {self.breaker.failures} calls in a row"
            )
        cfg, error = self.config, None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                time.sleep(min(cfg.backoff_s * 2 ** (attempt - 1), cfg.backoff_max_s))
            try:
                status, data = self._request(method, path, body)
            except (OSError, http.client.HTTPException) as exc:
                error = unreachable(f"{self.url}{path}", exc, cfg.timeout_s)
                continue
            if status < 400:
                try:
                    answer = read(data)
                except ValueError as exc:  # a broken server or proxy: retried and counted like a 5xx
                    error = RetrievalUnavailable(
                        "server_error", f"{self.url}{path} answered {status} with no usable answer: {exc}"
                    )
                    continue
                self.breaker.record(True)
                return answer
            message = data.get("error", data) if isinstance(data, dict) else data
            if status < 500:
                self.breaker.record(True)  # the service is up; the request was wrong
                raise RetrievalRequestError(f"{self.url}{path} answered {status}: {message}")
            error = RetrievalUnavailable("server_error", f"{self.url}{path} answered {status}: {message}")
        self.breaker.record(False)
        assert error is not None  # the loop ran (max_retries >= 0) and every pass that did not return set it
        raise error

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.config.timeout_s)
            self._local.conn = conn
        return conn

    def _request(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        conn = self._connection()
        try:
            return self._exchange(conn, method, path, body)
        except BaseException:
            conn.close()  # a half-read connection cannot be reused
            self._local.conn = None
            raise

    def _exchange(
        self, conn: http.client.HTTPConnection, method: str, path: str, body: Any
    ) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        conn.request(method, path, body=None if body is None else dumps(body), headers=headers)
        response = conn.getresponse()
        raw = response.read()
        try:
            return response.status, loads(raw)
        except ValueError:
            return response.status, {"error": raw[:200].decode(errors="replace")}


def read_results(data: Any, num_queries: int) -> list[list[Hit]]:
    """The hit lists of a ``/batch_search`` answer, one per query; any other answer is a ``ValueError`` saying so."""
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or len(results) != num_queries:
        raise ValueError(f"expected {num_queries} hit lists under 'results', got {str(data)[:200]}")
    try:
        return [hits_from_json(hits) for hits in results]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"a hit is not {{'docid', 'score', 'payload'}} ({type(error).__name__}: {error})"
        ) from None


URL_ENV = "RAGYM_RETRIEVAL_URL"
"""Environment variable naming the service for every env of a job (set once by the launch or submit)."""

TOKEN_ENV = "RAGYM_RETRIEVAL_TOKEN"
"""Environment variable holding the bearer token (read by the server and the client)."""


class ServiceRetrievers:
    """The service's retrievers as a ``RetrieverSource``: one ``ServiceRetriever`` per name, built on first use."""

    def __init__(self, url: str, config: ClientConfig | None = None):
        self.url, self.config = url, config or ClientConfig(token=os.environ.get(TOKEN_ENV) or None)
        self._retrievers: dict[str, ServiceRetriever] = {}
        self._lock = threading.Lock()

    def retriever(self, name: str) -> ServiceRetriever:
        """The service's retriever ``name`` (one client per name, so one breaker per name)."""
        with self._lock:
            if name not in self._retrievers:
                self._retrievers[name] = ServiceRetriever(self.url, name, self.config)
            return self._retrievers[name]


_SHARED: dict[tuple[str, ClientConfig], ServiceRetrievers] = {}
_SHARED_LOCK = threading.Lock()


def service_retrievers(url: str, config: ClientConfig | None = None) -> ServiceRetrievers:
    """One source per (url, config) in this process: the envs of a worker share its clients and breakers, so
    once the service is known to be down every episode fails fast instead of each waiting out timeouts."""
    config = config or ClientConfig(token=os.environ.get(TOKEN_ENV) or None)
    with _SHARED_LOCK:
        key = (url, config)
        if key not in _SHARED:
            _SHARED[key] = ServiceRetrievers(url, config)
        return _SHARED[key]
