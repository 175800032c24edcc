"""DocMemo's evidence and candidate selection: unshown pages first, reshow and judged-candidate switches."""

from __future__ import annotations

import pytest

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.docmemo.beliefs import top_k_fresh_first
from ragym.envs.docmemo.env import DocMemoEnv
from ragym.envs.docmemo.views import earlier_evidence, memory_lines
from ragym.envs.events import events_of
from tests.envs.docmemo.test_docmemo import FixedRetriever, last, turn
from tests.envs.fakes import EveryName

# (pages, scores, k, stale, expected): expected is best first by score, ties to the lower page
SELECTION_CASES = [
    ([1, 2, 3, 4], [0.9, 0.8, 0.1, 0.5], 2, set(), [1, 2]),  # nothing stale: plain top-k
    ([1, 2, 3, 4], [0.9, 0.8, 0.1, 0.5], 2, {1}, [2, 4]),  # enough fresh pages: the stale one is skipped
    ([1, 2, 3, 4], [0.9, 0.8, 0.1, 0.5], 2, {1, 2}, [4, 3]),  # a weak fresh page beats a strong stale one
    ([1, 2, 3, 4], [0.9, 0.8, 0.1, 0.5], 3, {1, 2, 4}, [1, 2, 3]),  # one fresh page, best two stale fill up
    ([1, 2, 3, 4], [0.9, 0.8, 0.1, 0.5], 3, {1, 2, 3, 4}, [1, 2, 4]),  # all stale: plain top-k
    ([7, 3, 5], [0.5, 0.5, 0.5], 2, set(), [3, 5]),  # ties go to the lower page
    ([7, 3, 5], [0.2, 0.5, 0.4], 9, {3}, [3, 5, 7]),  # k beyond the pool: every page
    ([7, 3, 5], [0.2, 0.5, 0.4], 0, set(), []),
]


@pytest.mark.parametrize("pages,scores,k,stale,expected", SELECTION_CASES)
def test_top_k_fresh_first_hand_cases(pages, scores, k, stale, expected):
    assert top_k_fresh_first(pages, scores, k, stale) == expected


def test_top_k_fresh_first_rejects_misaligned_scores():
    with pytest.raises(ValueError, match="3 pages but 2 scores"):
        top_k_fresh_first([1, 2, 3], [0.1, 0.2], 1)


def make_env(**overrides) -> DocMemoEnv:
    """Page p scores (21 - p) / 20 and lambda stays 1: candidates are pages in order, beliefs rank the same
    way until feedback moves them; radius 0 keeps feedback on the marked page."""
    scores = [(20 - i) / 20 for i in range(20)]
    return DocMemoEnv(retriever=EveryName(FixedRetriever(scores)), eta=1.0, radius=0, **overrides)


def play(env: DocMemoEnv):
    """Three rounds: select 1-5, mark 1 useful and 3 irrelevant; select 6; select 7. Evidence events."""
    _, info = env.reset(seed=0)
    env.step(turn("<select>1,2,3,4,5</select>"))
    _, _, _, _, info = env.step(
        turn("<refine><query>q</query><note>n1</note><useful>1</useful><irrelevant>3</irrelevant></refine>")
    )
    round1_candidates = last(info, "candidates")["pages"]
    obs1, *_ = env.step(turn("<select>6</select>"))
    env.step(turn("<refine><query>q</query></refine>"))
    obs2, *_, info = env.step(turn("<select>7</select>"))
    evidence = [(e["pages"], e["new"]) for e in events_of(info["events"], "evidence")]
    return evidence, round1_candidates, obs1, obs2


# Means after round 0: page 1 = 0.8 (useful), page 2 ~ 0.72, page 3 ~ 0.56 (irrelevant) below page 4 ~ 0.67.
EVIDENCE_CASES = [
    # unshown first: round 1 shows the three unshown pages of A; round 2 has one left, the best shown fill up
    (False, [([1, 2, 3], [1, 2, 3]), ([4, 5, 6], [4, 5, 6]), ([1, 2, 7], [7])]),
    # the literal rule: the useful page 1 and page 2 come back every round
    (True, [([1, 2, 3], [1, 2, 3]), ([1, 2, 4], [4]), ([1, 2, 4], [])]),
]


@pytest.mark.parametrize("reshow,expected", EVIDENCE_CASES)
def test_evidence_prefers_pages_not_shown_before(reshow, expected):
    evidence, *_ = play(make_env(reshow_evidence=reshow))
    assert evidence == expected


def test_earlier_evidence_is_recalled_in_text_not_images():
    _, _, obs1, obs2 = play(make_env())
    assert len(obs1["images"]) == obs1["text"].count(IMAGE_PLACEHOLDER) == 3
    assert "not shown again (see your notes in memory): p1 useful, p2 unmarked, p3 irrelevant" in obs1["text"]
    assert "Page 1 (" in obs2["text"] and ", shown before)" in obs2["text"]
    assert "p3 irrelevant, p4 unmarked, p5 unmarked, p6 unmarked" in obs2["text"]  # 1, 2 shown again


def test_candidate_view_memory_lists_pages_read_and_notes():
    env = make_env()
    env.reset(seed=0)
    env.step(turn("<select>1,2</select>"))
    obs, *_ = env.step(turn("<refine><query>q2</query><note>see totals</note><useful>2</useful></refine>"))
    assert (
        'Round 1: read pages 1, 2; query "q2"; note: see totals; useful: 2; irrelevant: none' in obs["text"]
    )


def test_memory_helpers_leave_out_pages_marked_without_reading():
    episodic = [
        {"round": 0, "query": "q", "note": "", "evidence": [4], "useful": [4, 9], "irrelevant": []},
        {"round": 1, "query": "r", "note": "", "evidence": [5], "useful": [], "irrelevant": [4]},
    ]
    assert earlier_evidence(episodic, exclude=[5]) == (
        "Read in earlier rounds, not shown again (see your notes in memory): p4 irrelevant"
    )
    assert earlier_evidence(episodic, exclude=[4, 5]) == ""
    assert memory_lines(episodic)[0] == '  Round 1: read pages 4; query "q"; useful: 4, 9; irrelevant: none'


@pytest.mark.parametrize(
    "exclude,num_candidates,expected",
    [
        (False, 8, [1, 2, 3, 4, 5, 6, 7, 8]),  # judged pages 1 and 3 come back
        (True, 8, [2, 4, 5, 6, 7, 8, 9, 10]),  # judged pages make room for new ones
        (True, 19, [1, 2, *range(4, 21)]),  # 18 unjudged pages: the best judged one fills up
    ],
)
def test_judged_candidates_switch(exclude, num_candidates, expected):
    env = make_env(exclude_judged_candidates=exclude, num_candidates=num_candidates)
    _, candidates, *_ = play(env)
    assert candidates == expected
