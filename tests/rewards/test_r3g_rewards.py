"""R3G rewards: tables of episodes (valid, malformed, reward-hacking) with hand-computed values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragym.envs import events as ev
from ragym.envs.r3g import events as r3g_ev
from ragym.rewards import Rubric, score_answer
from ragym.rewards.choices import parse_choice
from ragym.rewards.episode import Episode
from ragym.rewards.r3g import r3g_evidence_recall, r3g_format, r3g_judge_ndcg

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "rewards" / "r3g.yaml"
POOL = ["p1", "p2", "g", "p4", "p5"]
TRUTH = {
    "answer_choice": "C",
    "answer": "red",
    "options": {"A": "blue", "B": "green", "C": "red", "D": "black"},
    "gold_images": ["g"],
    "scenario": "lid",
}


def episode(
    final: list[float] | None,
    answer: str | None = "C",
    k: int = 1,
    rerank: str = "fused",
    extra: list[dict] | None = None,
    pool: list[str] = POOL,
) -> Episode:
    """plan, retrieve, judge (ranking by ``final``), answer; ``final`` None: the pool was never judged."""
    events = [
        r3g_ev.r3g_task(["g"], "lid", 5, k, rerank, True),
        ev.action(0, "plan", True),
        r3g_ev.plan(0, "p"),
        ev.action(1, "retrieve", True),
        r3g_ev.coarse_retrieval(1, pool, [0.9] * 5, [0.2] * 5, ["g"]),
    ]
    turns = ["<plan>p</plan>", "<retrieve></retrieve>"]
    if final is not None:
        order = sorted(range(5), key=lambda i: (-final[i], i))
        events += [
            ev.action(2, "judge", True),
            r3g_ev.evidence_selected(2, pool, [0.2] * 5, [None] * 5, final, order[:k], ["g"], rerank),
        ]
        turns.append("<judge>...</judge>")
    if answer is not None:
        events += [ev.action(len(turns), "answer", True), ev.answer(len(turns), answer)]
        turns.append(f"<answer>{answer}</answer>")
    return Episode("mragbench", turns, events + (extra or []), TRUTH)


GOLD_FIRST = [0.5, 0.4, 0.9, 0.1, 0.0]
GOLD_THIRD = [0.9, 0.8, 0.5, 0.1, 0.0]


@pytest.mark.parametrize(
    ("ep", "recall", "recall3", "ndcg"),
    [
        (episode(GOLD_FIRST), 1.0, 1.0, 1.0),
        (episode(GOLD_THIRD), 0.0, 1.0, 0.5),  # 1 / log2(4)
        (episode(GOLD_THIRD, k=3), 1.0, 1.0, 0.5),
        (episode([1.0] * 5), 0.0, 1.0, 0.5),  # hacking: all candidates "perfect" -> Stage-1 order
        (episode(None), 0.0, 0.0, 0.0),  # retrieved, never judged
        (episode(GOLD_FIRST, pool=["p1", "p2", "p3", "p4", "p5"]), 0.0, 0.0, None),  # no gold in pool
        (episode(GOLD_THIRD, rerank="stage1"), 0.0, 1.0, None),  # no-module ablation: no judge to reward
        (episode([0.0] * 5, rerank="none"), 0.0, 1.0, None),  # MRAG: retrieval order, no judge to reward
    ],
)
def test_recall_and_judge_table(ep: Episode, recall: float, recall3: float, ndcg: float | None) -> None:
    assert r3g_evidence_recall(ep) == recall
    assert r3g_evidence_recall(ep, k=3) == recall3
    value = r3g_judge_ndcg(ep)
    assert value is None if ndcg is None else math.isclose(value, ndcg)


def test_recall_without_gold_is_skipped_and_fraction_mode() -> None:
    ep = episode(GOLD_FIRST)
    assert (
        r3g_evidence_recall(Episode("mragbench", ep.turns, ep.events, {**TRUTH, "gold_images": []})) is None
    )
    two_gold = Episode("mragbench", ep.turns, ep.events, {**TRUTH, "gold_images": ["g", "p1"]})
    assert r3g_evidence_recall(two_gold, mode="fraction") == 0.5
    assert r3g_evidence_recall(two_gold, k=2, mode="fraction") == 1.0


@pytest.mark.parametrize(
    ("extra", "binary", "fraction"),
    [
        ([], 1.0, 1.0),
        ([ev.protocol_violation(1, "second_retrieval")], 0.0, 0.75),
        ([r3g_ev.judge_error(2, 4, "out_of_range")], 0.0, 0.75),
        ([r3g_ev.judge_error(2, 4, "not_judged"), ev.format_error(3, "x")], 0.0, 0.75),
    ],
)
def test_format_table(extra: list[dict], binary: float, fraction: float) -> None:
    ep = episode(GOLD_FIRST, extra=extra)
    assert r3g_format(ep) == binary and r3g_format(ep, mode="fraction") == fraction


def test_turn_the_env_never_saw_is_a_bad_turn() -> None:
    ep = episode(GOLD_FIRST)
    cut = Episode(ep.data_source, [*ep.turns, "<judge>[1] r="], ep.events, ep.ground_truth, truncated=True)
    assert r3g_format(cut, mode="fraction") == 0.8


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("C", 1.0),
        ("(c)", 1.0),
        ("The answer is C.", 1.0),
        ("C. red", 1.0),
        ("red", 1.0),
        ("It is red.", 1.0),
        ("B", 0.0),
        ("A B C D", 0.0),
        ("C or D", 0.0),
        ("answer: C, or maybe answer: D", 0.0),
        ("", 0.0),
    ],
)
def test_answer_letter_is_parsed_robustly(text: str, score: float) -> None:
    assert score_answer("mragbench", text, TRUTH) == score


def test_parse_choice_needs_exactly_one_option_text() -> None:
    assert parse_choice("red or blue", TRUTH["options"]) is None


def test_recipe_totals_by_hand() -> None:
    rubric = Rubric.from_recipe(RECIPE)
    result = rubric.score(episode(GOLD_THIRD, answer="<b>C</b>"))
    assert result.breakdown["outcome"] == 0.0  # markup earns nothing
    assert result.breakdown["recall_at_3"] == 1.0 and result.breakdown["recall_at_1"] == 0.0
    assert math.isclose(result.total, 0.0 + 0.5 * 0.0 + 0.2 * 1.0 + 0.3 * 0.5)
    good = rubric.score(episode(GOLD_FIRST))
    assert math.isclose(good.total, 1.0 + 0.5 + 0.2 + 0.3)
