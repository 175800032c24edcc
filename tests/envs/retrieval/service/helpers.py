"""A retrieval service on a free loopback port in a background thread, and fake retrievers for tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.retrievers import FaissRetriever
from ragym.envs.retrieval.service.config import DEFAULT_HOST


def free_port() -> int:
    """A port nothing listens on right now (on 127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind((DEFAULT_HOST, 0))
        return sock.getsockname()[1]


@contextmanager
def running(app: Any, port: int | None = None, ready_timeout_s: float = 20.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 until the block ends; yields the base URL."""
    import uvicorn

    port = port or free_port()
    config = uvicorn.Config(app, host=DEFAULT_HOST, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + ready_timeout_s
    while not server.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.02)
    assert server.started, "retrieval service did not start"
    try:
        yield f"http://{DEFAULT_HOST}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class Recording:
    """Wraps a retriever and records the size and k of every ``batch_search`` call."""

    def __init__(self, inner: Any, delay_s: float = 0.0):
        self.inner = inner
        self.delay_s = delay_s
        self.calls: list[tuple[int, int]] = []
        self.fail_with: Exception | None = None
        self.release = threading.Event()
        self.release.set()

    def batch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        """The inner result, after an optional delay or a gate that a test holds closed."""
        self.calls.append((len(queries), k))
        self.release.wait(timeout=30)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        return self.inner.batch_search(queries, k)


def random_faiss(num: int = 500, dim: int = 16, seed: int = 0) -> tuple[FaissRetriever, np.ndarray]:
    """A flat retriever over random vectors, and its normalised vectors."""
    vectors = np.random.default_rng(seed).standard_normal((num, dim)).astype(np.float32)
    retriever = FaissRetriever.from_vectors(vectors, [f"d{i}" for i in range(num)], lambda r: {"row": r})
    return retriever, retriever.index.reconstruct_n(0, num)


def ids(results: list[list[Hit]]) -> list[list[str]]:
    """Docids of each result list."""
    return [[h.docid for h in hits] for hits in results]
