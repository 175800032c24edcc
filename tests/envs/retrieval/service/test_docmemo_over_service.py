"""DocMemo over the retrieval service: a dead or stalled service is an observation and a ``retrieval_error``
event (never a crash or a hang), and page search works again once the service answers."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ragym.envs import make_env
from ragym.envs.docmemo.store import DocStore, doc_key, save_store
from ragym.envs.events import events_of
from ragym.envs.metrics import episode_metrics
from ragym.envs.retrieval.hits import Hit, NamedRetrievers
from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.client import ServiceRetriever
from tests.envs.retrieval.service.helpers import Recording, free_port, running

NUM_PAGES = 6
SCORES = (0.1, 0.9, 0.3, 0.8, 0.2, 0.5)  # page 2 first, then 4, 6, 3, 5, 1
DOC = "report.pdf"


class FixedPages:
    """Scores page i with ``SCORES[i]`` whatever the query (the served side of the test)."""

    def batch_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        order = np.argsort(-np.asarray(SCORES), kind="stable")[:k]
        return [[Hit(str(i + 1), SCORES[i]) for i in order] for _ in queries]

    def search(self, query: str, k: int) -> list[Hit]:
        return self.batch_search([query], k)[0]


def _store_root(tmp_path: Path) -> Path:
    texts = tuple(f"Page {i + 1} text." for i in range(NUM_PAGES))
    store = DocStore(DOC, texts, texts, ("text",) * NUM_PAGES, np.eye(NUM_PAGES, dtype=np.float32), "fixed")
    save_store(store, tmp_path / "docs" / doc_key(DOC), dpi=72)
    return tmp_path / "docs"


def _refine(query: str = "revenue") -> str:
    return f"<reason>search again</reason><refine><query>{query}</query></refine>"


def test_docmemo_reports_a_dead_then_stalled_service_and_recovers(tmp_path: Path) -> None:
    root = _store_root(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = make_env(
        "DocMemo-v0",
        store_root=str(root),
        retrieval_url=url,
        retrieval_timeout_s=0.5,
        retrieval_retries=0,
        show_images=False,
        max_turns=40,
    )
    options = {"question": "What was the revenue?", "doc_id": DOC}

    start = time.monotonic()
    obs, info = env.reset(seed=0, options=options)  # nothing listens on the port
    assert time.monotonic() - start < 5
    assert "Retrieval is unavailable" in obs["text"] and not events_of(info["events"], "candidates")
    [error] = events_of(info["events"], "retrieval_error")
    assert (error["retriever"], error["reason"], error["turn"]) == (f"pages/{doc_key(DOC)}", "connection", -1)
    obs, _, term, trunc, info = env.step("<reason>x</reason><select>2</select>")  # nothing to select
    assert (
        not (term or trunc) and events_of(info["events"], "protocol_violation")[-1]["reason"] == "wrong_phase"
    )

    pages = Recording(FixedPages())
    pages.release.clear()  # the service is up but every search stalls
    with running(RetrievalApp({f"pages/{doc_key(DOC)}": Served(pages, "text")}), port=port):
        start = time.monotonic()
        obs, _, term, trunc, info = env.step(_refine())
        assert time.monotonic() - start < 5
        assert "Retrieval is unavailable" in obs["text"] and not (term or trunc)
        assert events_of(info["events"], "retrieval_error")[-1]["reason"] in ("timeout", "circuit_open")
        pages.release.set()  # the service answers again
        assert ServiceRetriever(url, "x").ready()
        deadline = time.monotonic() + 15  # the shared breaker lets a probe through after its cool-down
        while not events_of(info["events"], "candidates"):
            assert time.monotonic() < deadline, "page search never recovered"
            assert not (term or trunc), "the episode ended before the service came back"
            time.sleep(0.5)
            obs, _, term, trunc, info = env.step(_refine())
    [candidates] = events_of(info["events"], "candidates")
    assert candidates["pages"][:3] == [2, 4, 6] and candidates["round"] == 0
    assert "Candidate pages" in obs["text"]
    obs, _, term, trunc, info = env.step("<reason>x</reason><select>2,4</select>")  # the episode goes on
    assert events_of(info["events"], "evidence")[-1]["pages"] and not (term or trunc)
    errors = len(events_of(info["events"], "retrieval_error"))
    assert errors >= 2 and episode_metrics("DocMemo-v0", info["events"])["retrieval_errors"] == errors


def test_an_explicit_retriever_wins_over_the_service(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RAGYM_RETRIEVAL_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    pages = NamedRetrievers({f"pages/{doc_key(DOC)}": FixedPages()})
    env = make_env("DocMemo-v0", store_root=str(_store_root(tmp_path)), retriever=pages, show_images=False)
    obs, info = env.reset(seed=0, options={"question": "What was the revenue?", "doc_id": DOC})
    assert not events_of(info["events"], "retrieval_error")
    assert events_of(info["events"], "candidates")[0]["pages"][:3] == [2, 4, 6]
