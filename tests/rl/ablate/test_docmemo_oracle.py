"""Issue #37 item 5: the docmemo grid's oracle refines the query as DocMemo's reasoner does (the question plus
the useful evidence's terms, or plus what is missing), and without page-belief memory the evidence follows the
current query, so "w/o tri-level memory" can move between rounds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragym.envs.docmemo.env import DocMemoEnv
from ragym.envs.docmemo.store import DocStore, save_store
from ragym.envs.docmemo.views import evidence_view
from ragym.envs.events import events_of
from ragym.envs.retrieval.hits import Hit
from ragym.rl.ablate import docmemo
from ragym.rl.ablate.docmemo import NO_MEMORY, excerpts_shown, oracle_loop, refined_query, terms
from tests.envs.fakes import EveryName

QUESTION = "How much did the pension fund grow in 2015?"
PAGES = {
    1: "Contents: pension fund overview, letters",
    2: "The pension fund did grow 8 percent in 2015, see the actuarial reserves schedule",
    3: "Pension fund governance and the board",
    4: "Pension fund investment policy",
    9: "Actuarial reserves schedule: reserves by year, percent funded",  # gold, no question term
}
TEXTS = tuple(PAGES.get(p, f"Staff canteen menu number {p}") for p in range(1, 13))
GOLD = {2, 9}


class OverlapRetriever:
    """Scores a page by how many distinct terms it shares with the query, so the query decides the ranking."""

    def search(self, query: str, k: int) -> list[Hit]:
        asked = set(terms(query))
        scores = [len(asked & set(terms(text))) for text in TEXTS]
        order = np.argsort(-np.asarray(scores), kind="stable")[:k]
        return [Hit(str(i + 1), float(scores[i])) for i in order]


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stores")
    n = len(TEXTS)
    store = DocStore("fund.pdf", TEXTS, TEXTS, ("text",) * n, np.eye(n, dtype=np.float32), "fake")
    save_store(store, root / "fund", dpi=72)
    return root


def recall_per_round(store_root: Path, **env: object) -> list[float]:
    """The grid's oracle over the pension document with M=3, E=2; recall of GOLD after each round."""
    settings = {"show_images": False, "num_candidates": 3, "num_evidence": 2, "max_rounds": 3, **env}
    loop_env = DocMemoEnv(retriever=EveryName(OverlapRetriever()), store_root=str(store_root), **settings)
    shown = oracle_loop(loop_env, {"question": QUESTION, "doc_id": "fund.pdf"}, GOLD, 0, True, True)
    return [len(pages & GOLD) / len(GOLD) for pages in shown]


@pytest.mark.parametrize(
    ("useful", "read", "expected"),
    [
        # The useful excerpt's terms that the question lacks, most frequent first, ties in order of appearance.
        ([PAGES[2]], [PAGES[2]], f"{QUESTION} percent actuarial reserves schedule"),
        ([PAGES[9], PAGES[2]], [], f"{QUESTION} reserves actuarial schedule percent year"),
        # Nothing useful: the question's terms that no excerpt read contains.
        ([], [PAGES[1], PAGES[3]], f"{QUESTION} did grow"),
        ([], [], f"{QUESTION} did pension fund grow"),
        ([], [PAGES[2]], QUESTION),  # every term was read: the question alone
    ],
)
def test_refined_query_follows_the_evidence(useful: list[str], read: list[str], expected: str) -> None:
    assert refined_query(QUESTION, useful, read) == expected


def test_excerpts_are_read_back_from_the_evidence_view(store_root: Path) -> None:
    from ragym.envs.docmemo.store import load_store

    store = load_store(store_root / "fund")
    text = evidence_view(store, [2, 9], [9], 30, [0, 0], is_last=False, earlier="Read in earlier rounds: p1")
    assert excerpts_shown(text) == {2: TEXTS[1][:30].strip(), 9: TEXTS[8][:30].strip()}
    assert excerpts_shown(evidence_view(store, [4], [4], 0, [1], is_last=True)) == {4: ""}


def test_the_refined_query_carries_the_useful_page_and_moves_similarity_only_candidates(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_memory = {**NO_MEMORY, "crop_dense_pages": True}
    # Round 1 reads pages 2 (gold) and 1; the query with page 2's terms brings gold page 9 into round 2.
    assert recall_per_round(store_root, **no_memory) == [0.5, 1.0, 1.0]
    # With the question as every round's query (the oracle before issue 37), similarity-only rounds are flat.
    monkeypatch.setattr(docmemo, "refined_query", lambda question, useful, read: question)
    assert recall_per_round(store_root, **no_memory) == [0.5, 0.5, 0.5]


def test_the_oracle_writes_the_refined_query_into_the_env(store_root: Path) -> None:
    env = DocMemoEnv(
        retriever=EveryName(OverlapRetriever()),
        store_root=str(store_root),
        show_images=False,
        num_candidates=3,
        num_evidence=2,
        **NO_MEMORY,
    )
    oracle_loop(env, {"question": QUESTION, "doc_id": "fund.pdf"}, GOLD, 0, True, True)
    queries = [e["query"] for e in events_of(env.events, "candidates")]
    assert queries[0] == QUESTION and queries[1] == f"{QUESTION} percent actuarial reserves schedule"
    # Round 2 found page 9 useful too: its terms join page 2's.
    assert queries[2] == f"{QUESTION} reserves percent actuarial schedule year"
    # Round 1 selected its three candidates (2, 1, 3) and read 2 and 1; round 2 adds page 9, which the refined
    # query brought in, and shows the pages of A not read yet (reshow_evidence off, as in full): 9, then 3.
    assert [e["pages"] for e in events_of(env.events, "evidence")][:2] == [[2, 1], [9, 3]]


def test_what_is_missing_is_read_against_every_round_so_far(store_root: Path) -> None:
    """No page useful (gold page 9 never shows): each refinement adds the question's terms that no excerpt read so
    far holds. One evidence page a round and ``reshow_evidence`` off (``full``'s): round 1 reads page 2, which holds
    every term of the question, and round 2 reads page 1 alone, which lacks "did" and "grow". Read against both
    rounds nothing is missing and the query stays the question; against round 2's page alone it would add them."""
    env = DocMemoEnv(
        retriever=EveryName(OverlapRetriever()),
        store_root=str(store_root),
        show_images=False,
        num_candidates=3,
        num_evidence=1,
        max_rounds=3,
        reshow_evidence=False,
    )
    oracle_loop(env, {"question": QUESTION, "doc_id": "fund.pdf"}, {9}, 0, True, True)
    assert [e["pages"] for e in events_of(env.events, "evidence")] == [[2], [1], [3]]
    assert [e["query"] for e in events_of(env.events, "candidates")] == [QUESTION] * 3
    assert refined_query(QUESTION, [], [PAGES[1]]) == f"{QUESTION} did grow"  # round 2's page alone


def test_without_belief_memory_evidence_follows_the_current_query(store_root: Path) -> None:
    # Round 1's similarity kept as the belief prior ranks evidence by the question every round: page 9 never
    # shows, whatever the query. That prior is page-belief memory, which "w/o tri-level memory" removes. The
    # evidence rule re-shows read pages here, so that the ranking alone decides what is shown.
    reshown = {**NO_MEMORY, "reshow_evidence": True}
    assert recall_per_round(store_root, **{**reshown, "belief_memory": True}) == [0.5, 0.5, 0.5]
    assert recall_per_round(store_root, **reshown) == [0.5, 1.0, 1.0]
    with pytest.raises(ValueError, match="belief_update=False"):
        DocMemoEnv(belief_memory=False)


def test_doctests() -> None:
    import doctest

    assert doctest.testmod(docmemo).failed == 0
