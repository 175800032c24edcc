"""Dynamic batching: queries that arrive while the index is busy are answered by one index call.

Each retriever gets one batcher with one worker task. The worker takes every query waiting (up to
``max_batch_size``); if fewer are waiting it waits at most ``max_wait_s`` for more, then runs one
``batch_search`` per distinct k in worker threads (faiss and bm25s release the GIL, so the event loop
keeps parsing requests meanwhile). A batch of at least ``2 x min_chunk`` queries may be split into up to
``parallel`` chunks searched at once (``ragym serve --batch-splits``): with one OpenMP thread per search one index
call uses one core, so on an idle node splitting uses the others; beside a busy co-tenant it costs, since the batch
waits for its slowest chunk. With ``encode``, each query's hits are encoded in the same worker thread, so a result
leaves the batcher in the form the service caches and answers with. Under load, batches grow with the number of
concurrent clients, which is what keeps throughput near the index's batch throughput instead of its one-query
throughput.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class BatchStats:
    """Counters since the batcher started."""

    num_batches: int = 0
    """Index calls made."""
    num_queries: int = 0
    """Queries answered by them."""
    largest_batch: int = 0
    """Most queries in one index call."""
    busy_s: float = 0.0
    """Seconds index calls were running (wall clock; a split batch counts once): its share of a window says how
    much of the time the index searched, the rest being the request path and the wait for a batch to fill."""

    def as_dict(self) -> dict[str, Any]:
        """Counters and the mean batch size."""
        mean = self.num_queries / self.num_batches if self.num_batches else 0.0
        return {
            "batches": self.num_batches,
            "queries": self.num_queries,
            "largest_batch": self.largest_batch,
            "mean_batch": mean,
            "busy_s": self.busy_s,
        }


MIN_CHUNK = 24
"""Fewest queries per chunk of a split batch: faiss's BLAS path (threshold 20, ``search_settings``) and its
per-call overhead both want batches, so a batch is split only while each chunk keeps this many."""


class DynamicBatcher:
    """Coalesces concurrent ``submit`` calls for one retriever into ``batch_search`` calls."""

    def __init__(
        self,
        retriever: Any,
        max_batch_size: int,
        max_wait_s: float,
        executor: ThreadPoolExecutor,
        parallel: int = 1,
        min_chunk: int = MIN_CHUNK,
        encode: Callable[[list[Any]], Any] | None = None,
    ):
        if parallel < 1 or min_chunk < 1:
            raise ValueError(f"parallel and min_chunk must be >= 1, got {parallel}, {min_chunk}")
        self.retriever = retriever
        self.parallel = parallel
        self.min_chunk = min_chunk
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.executor = executor
        self.encode = encode
        self.stats = BatchStats()
        self._queue: deque[tuple[Any, int, asyncio.Future]] = deque()
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._worker: asyncio.Task | None = None

    def submit(self, query: Any, k: int) -> asyncio.Future:
        """A future of the top-k hits for ``query`` (encoded, with ``encode``), answered with the next batch."""
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        self._queue.append((query, k, future))
        self._wake.set()
        if len(self._queue) >= self.max_batch_size:
            self._full.set()
        return future

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
            if len(self._queue) < self.max_batch_size and self.max_wait_s > 0:
                self._full.clear()
                try:
                    await asyncio.wait_for(self._full.wait(), self.max_wait_s)
                except TimeoutError:
                    pass
            batch = [self._queue.popleft() for _ in range(min(self.max_batch_size, len(self._queue)))]
            await self._answer(batch)

    async def _answer(self, batch: list[tuple[Any, int, asyncio.Future]]) -> None:
        by_k: dict[int, list[tuple[Any, asyncio.Future]]] = {}
        for query, k, future in batch:
            by_k.setdefault(k, []).append((query, future))
        loop = asyncio.get_running_loop()
        for k, items in by_k.items():
            queries = [q for q, _ in items]
            started = time.perf_counter()
            try:
                results = await self._search(loop, queries, k)
                if len(results) != len(queries):
                    raise RuntimeError(
                        f"batch_search returned {len(results)} results for {len(queries)} queries"
                    )
            except Exception as error:  # every waiting request gets the error, the worker lives on
                log.exception("batch of %d queries failed", len(queries))
                for _, future in items:
                    if not future.done():
                        future.set_exception(error)
                continue
            finally:
                self.stats.busy_s += time.perf_counter() - started
            self.stats.num_batches += 1
            self.stats.num_queries += len(queries)
            self.stats.largest_batch = max(self.stats.largest_batch, len(queries))
            for (_, future), hits in zip(items, results, strict=True):
                if not future.done():
                    future.set_result(hits)

    async def _search(self, loop: asyncio.AbstractEventLoop, queries: list[Any], k: int) -> list[list[Any]]:
        """``batch_search`` over ``queries``, in up to ``parallel`` chunks of at least ``min_chunk`` at once."""
        parts = max(1, min(self.parallel, len(queries) // self.min_chunk))
        bounds = [len(queries) * i // parts for i in range(parts + 1)]
        calls = [
            loop.run_in_executor(self.executor, self._search_chunk, queries[lo:hi], k)
            for lo, hi in itertools.pairwise(bounds)
        ]
        return [hits for chunk in await asyncio.gather(*calls) for hits in chunk]

    def _search_chunk(self, queries: list[Any], k: int) -> list[Any]:
        """One index call (in a worker thread), each query's hits encoded there too."""
        results = self.retriever.batch_search(queries, k)
        return results if self.encode is None else [self.encode(hits) for hits in results]

    def close(self) -> None:
        """Stop the worker; queries still waiting get a ``RuntimeError``."""
        if self._worker is not None:
            self._worker.cancel()
        while self._queue:
            future = self._queue.popleft()[2]
            if not future.done():
                future.set_exception(RuntimeError("the retrieval service is shutting down"))
