"""DocMemo-v0 at the edges a policy or a dataset can reach: a 1-page and a 1,000-page document (made here), page
numbers outside the document, repeated marks, and turns after the round budget."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.envs.docmemo.env import DocMemoEnv
from ragym.envs.docmemo.store import DocStore, doc_key, save_store
from ragym.envs.events import events_of
from tests.envs.docmemo.test_docmemo import FixedRetriever, last, turn
from tests.envs.fakes import EveryName


def document_env(tmp_path, num_pages: int, **overrides) -> tuple[DocMemoEnv, dict]:
    """An env over a ``num_pages``-page document on disk whose page p scores p / num_pages (the last page first)."""
    doc_id = f"doc{num_pages}.pdf"
    texts = tuple(f"Page {p} text." for p in range(1, num_pages + 1))
    embeddings = np.ones((num_pages, 4), np.float32) / 2
    store = DocStore(doc_id, texts, texts, ("text",) * num_pages, embeddings, "fixed")
    save_store(store, tmp_path / doc_key(doc_id), dpi=72)
    scores = [(p + 1) / num_pages for p in range(num_pages)]
    env = DocMemoEnv(
        store_root=str(tmp_path), retriever=EveryName(FixedRetriever(scores)), show_images=False, **overrides
    )
    return env, {"question": "Which page?", "doc_id": doc_id}


@pytest.mark.parametrize("num_pages", [1, 1000])
def test_out_of_range_and_repeated_pages(tmp_path, num_pages):
    env, options = document_env(tmp_path, num_pages)
    _, info = env.reset(seed=0, options=options)
    candidates = last(info, "candidates")["pages"]
    assert candidates == list(
        range(num_pages, max(num_pages - 8, 0), -1)
    )  # M pages, or every page when fewer
    for page in (0, num_pages + 1):
        _, _, term, trunc, info = env.step(turn(f"<select>{page}</select>"))
        assert not (term or trunc) and last(info, "protocol_violation")["pages"] == [page]
    env.step(turn(f"<select>{num_pages},{num_pages}</select>"))
    _, _, _, _, info = env.step(
        turn(f"<refine><query>q</query><useful>{num_pages}</useful><irrelevant>0</irrelevant></refine>")
    )
    assert last(info, "protocol_violation") == {
        "type": "protocol_violation",
        "turn": 3,
        "reason": "unseen_page",
        "pages": [0],
    }
    assert last(info, "selected")["accumulated"] == [num_pages] and not events_of(info["events"], "beliefs")
    _, _, _, _, info = env.step(
        turn(f"<refine><query>q</query><useful>{num_pages},{num_pages}</useful></refine>")
    )
    assert last(info, "feedback")["useful"] == [num_pages]
    before, after = events_of(info["events"], "candidates")[0]["means"], last(info, "candidates")["means"]
    # One +1 on alpha for the page marked twice (prior 1 + 2c, 1 + 2(1 - c) with c = 1, or 0.5 when the one page's
    # similarity is constant), decay 0.5 and 0.25 on its two lower neighbours; nothing wraps past the last page.
    (alpha, beta) = (3, 1) if num_pages > 1 else (2, 2)
    assert before[-1] == pytest.approx(alpha / (alpha + beta))
    assert after[-1] == pytest.approx((alpha + 1) / (alpha + beta + 1))
    assert np.count_nonzero(np.array(before) != np.array(after)) == min(num_pages, 3)


def test_turns_after_the_round_budget_are_refused(tmp_path):
    env, options = document_env(tmp_path, 3, max_rounds=1)
    env.reset(seed=0, options=options)
    obs, *_ = env.step(turn("<select>3</select>"))
    assert "This is the last round: answer now." in obs["text"]
    _, _, term, trunc, info = env.step(turn("<refine><query>q</query><useful>3</useful></refine>"))
    assert (term, trunc) == (False, True) and last(info, "truncated")["reason"] == "max_rounds"
    assert last(info, "feedback")["useful"] == [3]  # recorded: the marks of the last round still count
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(turn("<refine><query>q</query><useful>2</useful></refine>"))
