"""The retrieval service as a plain ASGI app (uvicorn standalone, Ray Serve on a cluster).

Routes (JSON in and out; ``ragym.envs.retrieval.service.wire`` has the query and hit forms):

- ``POST /search``        ``{"retriever", "query", "k"}`` -> ``{"hits": [hit...]}``
- ``POST /batch_search``  ``{"retriever", "queries", "k"}`` -> ``{"results": [[hit...]...]}``
- ``GET /health``         liveness, always 200 while the process serves: ``{"status": "ok", "ready": bool}``
- ``GET /ready``          200 with the retrievers (a versioned one says whether its index takes document rows:
  ``document_rows_refused``), cache and batch counters once every index is loaded, else 503
- ``POST /encoder``       ``{"retriever", "path"}`` -> ``{"version", "previous"}``: load the retriever version at
  ``path`` (``ragym.envs.retrieval.versions``: its query map and any document rows) and swap it into a versioned
  retriever; requests that arrive meanwhile wait for the swap, and the swap (which writes the document rows into the
  index) waits for the requests in flight, so no request fails or mixes versions (a Ray Serve deployment hands the
  route to ``ragym.envs.serving.encoder_sync``, which swaps every replica)

With a token configured, every route but ``/health`` needs ``Authorization: Bearer <token>`` (else 401).
Every query goes through the replay cache, then its retriever's dynamic batcher; the results are the
``Hit`` lists the in-process retriever returns for the normalised query, each encoded once, in the search thread
(``wire.encode_hits``): the cache keeps those bytes and every answer, cached or not, is assembled from them.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ragym.envs.retrieval.search_settings import set_search_threads
from ragym.envs.retrieval.service.batcher import DynamicBatcher
from ragym.envs.retrieval.service.cache import ReplayCache, cache_key, normalise_query
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.service.wire import (
    BadRequest,
    decode_query,
    dumps,
    encode_hits,
    loads,
    results_body,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """One retriever the service answers for, and the queries it takes."""

    retriever: Any
    """Anything with ``batch_search(queries, k) -> list[list[Hit]]``."""
    query: str = "text"
    """``text`` (strings) or ``vector`` (float32 vectors of ``dim``)."""
    dim: int | None = None
    """Vector length a ``vector`` retriever expects."""

    def check(self, name: str, query: Any) -> None:
        """Reject a query this retriever cannot take (422)."""
        if self.query == "text" and not isinstance(query, str):
            raise BadRequest(f"retriever {name!r} takes text queries")
        if self.query == "vector":
            if not isinstance(query, np.ndarray):
                raise BadRequest(f"retriever {name!r} takes vector queries")
            if self.dim is not None and query.shape != (self.dim,):
                raise BadRequest(f"retriever {name!r} takes {self.dim}-d vectors, got {query.shape[0]}")
            if not np.isfinite(query).all():  # refused alone: in a batch it would fail every query beside it
                raise BadRequest(f"retriever {name!r}: the query vector holds NaN or inf")


Loader = Callable[[], dict[str, Served]]
"""Builds the served retrievers (runs in a thread at startup so /health answers while indexes load)."""

EncoderRoute = Callable[[str, object], Awaitable[tuple[int, dict[str, Any]]]]
"""``POST /encoder``'s handler: (retriever, path) -> (status, body)."""

REPLICA_HEADER = b"x-ragym-replica"
"""Response header naming the replica that answered (set when the app is one replica of a deployment)."""


class RetrievalApp:
    """ASGI app: auth, routing, cache and batching in front of named retrievers."""

    def __init__(
        self,
        retrievers: dict[str, Served] | Loader,
        config: ServiceConfig | None = None,
        replica: str | None = None,
    ):
        self.config = config = config or ServiceConfig()
        self.replica = replica
        """Which replica of a deployment this is (Ray Serve), named in ``/ready`` and in every answer's
        ``x-ragym-replica`` header; None for ``ragym serve``."""
        self.encoder_route: EncoderRoute = self._swap_here
        """What ``POST /encoder`` does: swap this process's retriever; a Ray Serve replica's sync replaces it with
        a swap of every replica (``ragym.envs.serving.encoder_sync``)."""
        self._loader = retrievers if callable(retrievers) else (lambda: retrievers)
        self.retrievers: dict[str, Served] = {}
        self.cache = ReplayCache(config.cache_size)
        self.batchers: dict[str, DynamicBatcher] = {}
        self.load_error: str | None = None
        # Searches run in these threads, each with the plan's OpenMP threads, so that concurrent index calls
        # stay within the cores (ragym.envs.retrieval.search_settings: spinning OpenMP teams stall on a busy node).
        self.thread_plan = config.thread_plan()
        log.info("%s", self.thread_plan.describe())
        self._executor = ThreadPoolExecutor(
            max_workers=config.search_workers,
            thread_name_prefix="ragym-search",
            initializer=set_search_threads,
            initargs=(self.thread_plan.threads, True),
        )
        self._loading: asyncio.Task | None = None
        self._in_flight = 0  # search requests being answered (one event loop: a plain counter)
        self._swapping: asyncio.Event | None = None  # set while an encoder swap drains the requests in flight
        self._drained: asyncio.Event | None = None

    @property
    def ready(self) -> bool:
        """Every retriever is loaded."""
        return bool(self.batchers)

    async def start(self) -> None:
        """Load the retrievers (in a thread) and give each its batcher."""
        try:
            served = await asyncio.get_running_loop().run_in_executor(self._executor, self._loader)
        except Exception as error:
            self.load_error = f"{type(error).__name__}: {error}"
            log.exception("loading the retrievers failed")
            return
        self.retrievers = served
        if self.config.gc_freeze:
            gc.collect()
            gc.freeze()  # the loaded tables live as long as the service: full collections need not walk them
            log.info(
                "%d objects moved out of the garbage collector's passes (gc.freeze)", gc.get_freeze_count()
            )
        wait_s = self.config.max_wait_ms / 1000
        self.batchers = {
            name: DynamicBatcher(
                s.retriever,
                self.config.max_batch_size,
                wait_s,
                self._executor,
                self.config.batch_splits,
                encode=encode_hits,
            )
            for name, s in served.items()
        }
        log.info("retrieval service ready: %s", sorted(served))

    def _ensure_started(self) -> None:
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self.start())

    async def loaded(self) -> None:
        """Start loading the retrievers unless started, and wait until it ends (loaded, or ``load_error`` set)."""
        self._ensure_started()
        assert self._loading is not None  # _ensure_started set it
        await self._loading

    async def search(self, name: str, queries: list[Any], k: object) -> list[bytes]:
        """Each decoded query's hit list as JSON bytes (``wire.encode_hits``): cache first, then the batcher."""
        if not self.ready:
            raise BadRequest(self.load_error or "the retrieval service is still loading its indexes", 503)
        if name not in self.batchers:
            raise BadRequest(f"unknown retriever {name!r}; serving {sorted(self.batchers)}", 404)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.config.max_k:
            raise BadRequest(f"k must be an integer in 1..{self.config.max_k}, got {k!r}")
        while self._swapping is not None:  # an encoder swap is draining: start after it, on the new version
            await self._swapping.wait()
        self._in_flight += 1
        try:
            return await self._search(name, queries, k)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._drained is not None:
                self._drained.set()

    async def _search(self, name: str, queries: list[Any], k: int) -> list[bytes]:
        served, batcher = self.retrievers[name], self.batchers[name]
        # A versioned retriever's answers are cached per version: a swap never serves the old version's hits.
        version = getattr(served.retriever, "version", None)
        waits = []
        for query in queries:
            query = normalise_query(query)
            served.check(name, query)
            key = cache_key(name if version is None else f"{name}@{version}", query, k)
            found = self.cache.lookup(key)
            if found is None:
                found = batcher.submit(query, k)
                self.cache.start(key, found)
            waits.append(found)
        return [await found if isinstance(found, asyncio.Future) else found for found in waits]

    async def swap_encoder(self, name: str, path: object) -> dict[str, Any]:
        """Load the version at ``path`` (in a search thread), then swap it into retriever ``name`` (its query map and
        its document rows) once the requests in flight have finished; requests arriving meanwhile wait and search
        the new one."""
        from ragym.envs.retrieval.versions import load_query_encoder

        if not self.ready:
            raise BadRequest(self.load_error or "the retrieval service is still loading its indexes", 503)
        served = self.retrievers.get(name)
        if served is None or not hasattr(served.retriever, "swap"):
            versioned = sorted(n for n, s in self.retrievers.items() if hasattr(s.retriever, "swap"))
            raise BadRequest(f"retriever {name!r} takes no query encoder; versioned: {versioned}", 404)
        if not isinstance(path, str):
            raise BadRequest("an encoder swap needs 'path': the version folder on the service's machine")
        loop = asyncio.get_running_loop()
        try:
            encoder = await loop.run_in_executor(self._executor, load_query_encoder, path)
            # before the drain: an index that cannot take the version's document rows refuses it here
            await loop.run_in_executor(self._executor, served.retriever.check, encoder)
        except (OSError, ValueError, KeyError) as error:
            raise BadRequest(f"cannot load query encoder {path}: {error}") from None
        while self._swapping is not None:  # one swap at a time
            await self._swapping.wait()
        self._swapping, self._drained = asyncio.Event(), asyncio.Event()
        try:
            if self._in_flight:
                await self._drained.wait()
            previous = served.retriever.swap(encoder)
        finally:
            gate, self._swapping, self._drained = self._swapping, None, None
            gate.set()
        log.info("retriever %s: query encoder %s -> %s", name, previous and previous.version, encoder.version)
        return {"version": encoder.version, "previous": previous and previous.version}

    async def _swap_here(self, name: str, path: object) -> tuple[int, dict[str, Any]]:
        return 200, await self.swap_encoder(name, path)

    def status(self) -> dict[str, Any]:
        """Readiness details: retrievers, cache and batch counters."""
        return {
            "ready": self.ready,
            "replica": self.replica,
            "retrievers": {
                n: {
                    "query": s.query,
                    "dim": s.dim,
                    "version": getattr(s.retriever, "version", None),
                    # a versioned retriever: why its index cannot take a version's document rows (null: it can)
                    **(
                        {"document_rows_refused": s.retriever.row_refusal}
                        if hasattr(s.retriever, "swap")
                        else {}
                    ),
                }
                for n, s in self.retrievers.items()
            },
            "cache": {**self.cache.stats.as_dict(), "entries": len(self.cache)},
            "batches": {n: b.stats.as_dict() for n, b in self.batchers.items()},
            "search_threads": asdict(self.thread_plan),
            "error": self.load_error,
        }

    async def _route(
        self, method: str, path: str, headers: dict[bytes, bytes], body: bytes
    ) -> tuple[int, Any]:
        """(status, payload): JSON data, or a search's body already encoded (bytes)."""
        if path == "/health" and method == "GET":
            return 200, {"status": "ok", "ready": self.ready}
        self._authorise(headers)
        if path == "/ready" and method == "GET":
            return (200 if self.ready else 503), self.status()
        if path == "/encoder":
            if method != "POST":
                raise BadRequest("/encoder takes POST", 405)
            data = loads(body)
            if not isinstance(data, dict):
                raise BadRequest("the body must be a JSON object")
            return await self.encoder_route(str(data.get("retriever")), data.get("path"))
        if path in ("/search", "/batch_search"):
            if method != "POST":
                raise BadRequest(f"{path} takes POST", 405)
            data = loads(body)
            if not isinstance(data, dict):
                raise BadRequest("the body must be a JSON object")
            single = path == "/search"
            raw = [data.get("query")] if single else data.get("queries")
            if not isinstance(raw, list):
                raise BadRequest("batch_search needs 'queries': a list")
            if len(raw) > self.config.max_queries_per_request:
                raise BadRequest(f"at most {self.config.max_queries_per_request} queries per request", 413)
            results = await self.search(
                str(data.get("retriever")), [decode_query(q) for q in raw], data.get("k")
            )
            return 200, results_body(single, results)
        raise BadRequest(f"no route {method} {path}", 404)

    def _authorise(self, headers: dict[bytes, bytes]) -> None:
        if self.config.token is None:
            return
        given = headers.get(b"authorization", b"")
        if not hmac.compare_digest(given, b"Bearer " + self.config.token.encode()):
            raise BadRequest("missing or wrong bearer token", 401)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        self._ensure_started()
        # chunks joined once (a body grown by += copies itself per chunk: 64 MB took 20 s); past the cap, dropped
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= self.config.max_body_bytes:
                chunks.append(chunk)
            more = message.get("more_body", False)
        headers = dict(scope.get("headers") or [])
        try:
            if size > self.config.max_body_bytes:
                raise BadRequest(
                    f"the body is {size} bytes; at most {self.config.max_body_bytes} are read", 413
                )
            status, payload = await self._route(scope["method"], scope["path"], headers, b"".join(chunks))
        except BadRequest as error:
            status, payload = error.status, {"error": str(error)}
        except Exception as error:  # a failing index is the server's fault, and the client should know why
            log.exception("search failed")
            status, payload = 500, {"error": f"{type(error).__name__}: {error}"}
        data = payload if isinstance(payload, bytes) else dumps(payload)
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ]
        if self.replica is not None:
            response_headers.append((REPLICA_HEADER, self.replica.encode()))
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": data})

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._ensure_started()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for batcher in self.batchers.values():
                    batcher.close()
                self._executor.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return
