"""Step rewards: per-turn splits sum to their reward's value; the rubric weights them and skips other terms."""

from __future__ import annotations

import pytest

from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.r3g import events as r3g_ev
from ragym.rewards.episode import Episode
from ragym.rewards.kbvqa import verification
from ragym.rewards.memora import memora_action_cost
from ragym.rewards.r3g import r3g_judge_ndcg
from ragym.rewards.rubric import Rubric
from ragym.rewards.steps import memora_cost_steps, r3g_judge_steps, rubric_step_rewards, verification_steps

CANDIDATES_0, CANDIDATES_1 = ["e1", "e2"], ["e3", "gold"]


def _kbvqa(decisions: list[ev.Event]) -> Episode:
    events = [
        kbvqa_ev.task(1, ["gold"], max_rejections=2, candidates_per_batch=2, max_turns=8),
        kbvqa_ev.search_image(0, 1, 0, CANDIDATES_0, "gold", 0),
        *decisions,
    ]
    return Episode("synthetic_kbvqa", [""] * 5, events, ["Paris"])


REJECT_0 = kbvqa_ev.verification(1, "reject", None, 1, 0, CANDIDATES_0, "gold")
SERVE_1 = kbvqa_ev.search_image(1, 1, 1, CANDIDATES_1, "gold", 2)
RERANK_1 = kbvqa_ev.verification(2, "rerank", "gold", 1, 1, CANDIDATES_1, "gold")
REJECT_1 = kbvqa_ev.verification(2, "reject", None, 1, 1, CANDIDATES_1, "gold")
AGAIN_1 = kbvqa_ev.verification(3, "rerank", "gold", 1, 1, CANDIDATES_1, "gold")


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        ([REJECT_0, SERVE_1, RERANK_1], {1: 0.2, 2: 1.0}),  # correct reject (delta), then Rerank(e*)
        ([REJECT_0, SERVE_1, REJECT_1], {1: 0.2, 2: 0.0}),  # rejecting the batch that holds e* earns 0
        ([REJECT_0, SERVE_1, REJECT_1, AGAIN_1], {1: 0.2, 2: 0.0}),  # a second decision on a batch: nothing
        ([], {}),
    ],
)
def test_verification_split_credits_each_decision_at_its_turn(decisions, expected) -> None:
    episode = _kbvqa(decisions)
    split = verification_steps(episode, delta=0.2)
    assert split == pytest.approx(expected)
    assert sum(split.values()) == pytest.approx(verification(episode, delta=0.2))


def test_verification_split_is_none_without_gold() -> None:
    events = [kbvqa_ev.search_image(0, 1, 0, CANDIDATES_0, None, 0)]
    assert verification_steps(Episode("generic", [""], events, "x")) is None


def test_memora_cost_split_charges_each_action_at_its_turn() -> None:
    events = [ev.action(0, "subquery", True), ev.action(1, "judge", True), ev.action(2, "extract", True)]
    episode = Episode("bright", ["a", "b", "c"], events, {"qrels": {}})
    split = memora_cost_steps(episode)
    assert split == pytest.approx({0: -0.01, 1: -0.02, 2: -0.01})
    assert sum(split.values()) == pytest.approx(memora_action_cost(episode))


def test_r3g_judge_split_is_the_judge_turns() -> None:
    events = [
        r3g_ev.coarse_retrieval(1, ["x", "g"], [0.9, 0.8], [0.6, 0.4], ["g"]),
        r3g_ev.evidence_selected(2, ["x", "g"], [0.6, 0.4], [0.1, 0.9], [0.7, 1.3], [1], ["g"], "fused"),
    ]
    episode = Episode("synthetic_r3g", ["p", "r", "j"], events, {"gold_images": ["g"]})
    assert r3g_judge_steps(episode) == {2: r3g_judge_ndcg(episode)} == {2: 1.0}


def test_rubric_step_rewards_weight_the_split_terms_and_skip_the_rest() -> None:
    rubric = Rubric.from_recipe(
        {"terms": {"outcome": {"weight": 1.0}, "verification": {"weight": 0.5, "params": {"delta": 0.4}}}}
    )
    episode = _kbvqa([REJECT_0, SERVE_1, RERANK_1])
    assert rubric_step_rewards(rubric, episode) == pytest.approx({1: 0.2, 2: 0.5})
    failed = Episode("synthetic_kbvqa", [""], [*episode.events, ev.episode_error(3, "step", "boom")], ["x"])
    assert rubric_step_rewards(rubric, failed) == {}
