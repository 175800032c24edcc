"""The naive per-request HTTP server (the benchmark's baseline) on 127.0.0.1 gives the same hits as in-process search."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from benchmarks.naive_server import HOST, HTTPRetriever, kb_retrievers, make_app
from ragym.envs.kbvqa.kb import load_kb


@pytest.fixture(scope="module")
def server_url(tiny_kb: Path):
    import uvicorn

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(make_app(kb_retrievers(str(tiny_kb))), host=HOST, port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "retrieval server did not start"
    yield f"http://{HOST}:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_text_and_image_search_match_in_process(server_url: str, tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    queries = ["first recorded 1800", "catalogued by Abbot"]
    remote = HTTPRetriever(server_url, "bm25").batch_search(queries, 3)
    local = kb.text_retriever("bm25").batch_search(queries, 3)
    assert [[h.docid for h in hits] for hits in remote] == [[h.docid for h in hits] for hits in local]
    vector = kb.query_embeddings[0]
    assert [h.docid for h in HTTPRetriever(server_url, "image").search(vector, 5)] == [
        h.docid for h in kb.image_retriever().search(vector, 5)
    ]


def test_unknown_retriever_is_an_http_error(server_url: str) -> None:
    import urllib.error

    with pytest.raises(urllib.error.HTTPError):
        HTTPRetriever(server_url, "nope").search("x", 1)
