"""The service over HTTP on 127.0.0.1: same hits as in-process retrievers, health, readiness, auth."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.client import ClientConfig, RetrievalRequestError, ServiceRetriever
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.service.wire import encode_query
from ragym.envs.serving.catalog import CatalogSpec, load_catalog
from tests.envs.retrieval.service.helpers import ids, random_faiss, running


@pytest.fixture(scope="module")
def kb_url(tiny_kb: Path):
    app = RetrievalApp(
        lambda: load_catalog(CatalogSpec(folders=(("kb-dir", str(tiny_kb)),))), ServiceConfig(max_wait_ms=1)
    )
    with running(app) as url:
        assert _wait_ready(url)
        yield url


def _wait_ready(url: str, timeout_s: float = 30.0, name: str = "image") -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ServiceRetriever(url, name).ready():
            return True
        time.sleep(0.05)
    return False


def _get(url: str, path: str, token: str | None = None) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_every_kb_retriever_answers_as_in_process(kb_url: str, tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    texts = ["first recorded 1800", "catalogued by Abbot"]
    assert ids(ServiceRetriever(kb_url, "bm25").batch_search(texts, 3)) == ids(
        kb.text_retriever("bm25").batch_search(texts, 3)
    )
    vectors = list(kb.query_embeddings[:3])
    remote = ServiceRetriever(kb_url, "image").batch_search(vectors, 5)
    local = kb.image_retriever().batch_search(vectors, 5)
    assert remote == [
        [h.__class__(h.docid, pytest.approx(h.score), h.payload) for h in hits] for hits in local
    ]
    path = str(kb.root / kb.queries["image"].iloc[0])
    assert ServiceRetriever(kb_url, "candidates").search(path, 4) == kb.candidate_retriever().search(path, 4)


def test_health_and_readiness_report_the_retrievers(kb_url: str) -> None:
    assert _get(kb_url, "/health") == (200, {"status": "ok", "ready": True})
    status, body = _get(kb_url, "/ready")
    assert status == 200 and {"image", "candidates", "bm25"} <= set(body["retrievers"])
    assert body["retrievers"]["image"]["query"] == "vector"


def test_a_deployment_replica_names_itself_in_every_answer(kb_url: str) -> None:
    """A Ray Serve replica's app (``replica`` set) names itself in ``/ready`` and in every answer's header, errors
    included, so a client can tell which replica answered; ``ragym serve``'s names none."""

    def answer(url: str, path: str) -> tuple[int, str | None, dict]:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("x-ragym-replica"), json.loads(response.read())

    with running(RetrievalApp({}, ServiceConfig(gc_freeze=False), replica="r7")) as url:
        assert answer(url, "/health")[:2] == (200, "r7")
        assert answer(url, "/nowhere")[:2] == (404, "r7")
        status, header, body = answer(url, "/ready")  # 503: an app with no retrievers is never ready
        assert (status, header, body["replica"]) == (503, "r7", "r7")
    status, header, body = answer(kb_url, "/ready")
    assert (status, header, body["replica"]) == (200, None, None)


def test_bad_requests_are_4xx_and_never_retried(kb_url: str) -> None:
    with pytest.raises(RetrievalRequestError, match="404.*unknown retriever"):
        ServiceRetriever(kb_url, "nope").search("x", 1)
    with pytest.raises(RetrievalRequestError, match="422.*vector"):
        ServiceRetriever(kb_url, "image").search("a string", 1)
    retriever = ServiceRetriever(kb_url, "bm25")
    with pytest.raises(RetrievalRequestError, match="422.*k must"):
        retriever.search("x", 0)
    assert retriever.breaker.state == "closed"


def test_not_ready_until_the_indexes_are_loaded() -> None:
    gate = threading.Event()

    def slow_loader():
        gate.wait(timeout=20)
        return {}

    with running(RetrievalApp(slow_loader)) as url:
        assert _get(url, "/health") == (200, {"status": "ok", "ready": False})
        assert _get(url, "/ready")[0] == 503
        gate.set()


def test_bearer_token_is_required_except_for_health(tiny_kb: Path) -> None:
    app = RetrievalApp(
        lambda: load_catalog(CatalogSpec(folders=(("kb-dir", str(tiny_kb)),))), ServiceConfig(token="s3cret")
    )
    with running(app) as url:
        assert _wait_ready_with(url, "s3cret")
        assert _get(url, "/health")[0] == 200
        assert _get(url, "/ready")[0] == 401
        assert _get(url, "/ready", "wrong")[0] == 401
        with pytest.raises(RetrievalRequestError, match="401"):
            ServiceRetriever(url, "bm25").search("first recorded", 2)
        good = ServiceRetriever(url, "bm25", ClientConfig(token="s3cret"))
        assert len(good.search("first recorded", 2)) == 2


def _wait_ready_with(url: str, token: str) -> bool:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if _get(url, "/ready", token)[0] == 200:
            return True
        time.sleep(0.05)
    return False


def _post(url: str, path: str, body: bytes) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_single_search_route_and_malformed_bodies(kb_url: str, tiny_kb: Path) -> None:
    status, body = _post(
        kb_url, "/search", json.dumps({"retriever": "bm25", "query": "first recorded", "k": 2}).encode()
    )
    local = load_kb(tiny_kb).text_retriever("bm25").search("first recorded", 2)
    assert status == 200 and [h["docid"] for h in body["hits"]] == [h.docid for h in local]
    assert _post(kb_url, "/search", b"{not json")[0] == 400
    assert (
        _post(kb_url, "/batch_search", json.dumps({"retriever": "bm25", "queries": "x", "k": 2}).encode())[0]
        == 422
    )
    too_many = json.dumps({"retriever": "bm25", "queries": ["x"] * 1025, "k": 1}).encode()
    assert _post(kb_url, "/batch_search", too_many)[0] == 413
    assert _post(kb_url, "/nowhere", b"{}")[0] == 404
    dim = load_kb(tiny_kb).entity_embeddings.shape[1]
    nan = {"retriever": "image", "query": encode_query(np.full(dim, np.nan, dtype=np.float32)), "k": 2}
    status, body = _post(kb_url, "/search", json.dumps(nan).encode())
    assert status == 422 and "NaN" in body["error"], body
    for bad_vector in ("abc", "é" * 8):  # bad padding, not ASCII: the client's mistake (422), not a 500
        status, body = _post(
            kb_url,
            "/search",
            json.dumps({"retriever": "image", "query": {"f32": bad_vector}, "k": 2}).encode(),
        )
        assert status == 422 and "base64" in body["error"], body


def test_a_body_over_max_body_bytes_is_a_413_not_kept_in_memory() -> None:
    inner, vectors = random_faiss()
    app = RetrievalApp({"vec": Served(inner, "vector", 16)}, ServiceConfig(max_body_bytes=4096))
    with running(app) as url:
        assert _wait_ready(url, name="vec")
        client = ServiceRetriever(url, "vec")
        assert ids(client.batch_search(list(vectors[:8]), 2)) == ids(inner.batch_search(list(vectors[:8]), 2))
        with pytest.raises(RetrievalRequestError, match="413.*at most 4096"):
            client.batch_search(list(vectors[:80]), 2)  # 80 base64 vectors: over 4 KB
        status, body = _post(url, "/batch_search", b"x" * 100_000)  # read and dropped, not parsed
        assert status == 413 and "the body is 100000 bytes" in body["error"]
        assert ids(client.batch_search(list(vectors[:8]), 2)) == ids(inner.batch_search(list(vectors[:8]), 2))
    with pytest.raises(ValueError, match="max_body_bytes must be >= 1"):
        ServiceConfig(max_body_bytes=0)


@pytest.mark.slow  # loads all-MiniLM-L6-v2 (shared with the DocMemo tests when they run in the same session)
def test_docmemo_page_search_is_served_per_document(tmp_path: Path) -> None:

    from ragym.envs.docmemo.pages import PageRetriever
    from ragym.envs.docmemo.store import DocStore, save_store
    from ragym.envs.retrieval.page_encoders import TextPageEncoder

    encoder = TextPageEncoder()
    texts = ("Revenue by region grew.", "Northern shipments fell.", "Board members.", "Outlook for 2027.")
    store = DocStore("report.pdf", texts, texts, ("text",) * 4, encoder.encode_queries(texts), encoder.name)
    save_store(store, tmp_path / "docs" / "report", dpi=72)
    app = RetrievalApp(
        lambda: load_catalog(CatalogSpec(folders=(("doc-store-root", str(tmp_path / "docs")),)))
    )
    with running(app) as url:
        assert _wait_ready(url, name="pages/report")
        queries = ["revenue by region", "shipments of the northern division"]
        remote = ServiceRetriever(url, "pages/report").batch_search(queries, 4)
    assert ids(remote) == ids(PageRetriever(store, encoder).batch_search(queries, 4))
    assert remote[0][0].docid == "1"  # pages are 1-based docids
