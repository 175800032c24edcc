"""MEMORA reward terms: a table of episodes (hand-computed values), reward hacking, and the recipe end to end."""

from __future__ import annotations

import math

import pytest

from ragym.envs import events as ev
from ragym.envs.memora import events as memora_ev
from ragym.envs.memora.env import MemoraEnv
from ragym.rewards import Episode, Rubric
from ragym.rewards.memora import memora_action_cost, memora_first_stage_ndcg, memora_format, memora_ndcg

QRELS = {"qrels": {"b": 1, "c": 2}, "excluded_ids": ["x"]}
IDEAL = 2 + 1 / math.log2(3)  # c (rel 2) at rank 1, b (rel 1) at rank 2


def ranking_episode(ranking: list[str], first: list[str] | None = None, turns: int = 1) -> Episode:
    events = [ev.action(t, "stop" if t == turns - 1 else "extract", True) for t in range(turns)]
    if first is not None:
        events.insert(0, memora_ev.first_stage("q", first, [1.0] * len(first)))
    events.append(memora_ev.final_ranking(turns - 1, ranking, [1.0] * len(ranking), 10, False, 0.0, 0.0))
    return Episode("bright", ["t"] * turns, events, QRELS)


@pytest.mark.parametrize(
    ("ranking", "expected"),
    [
        (["c", "b"], 1.0),
        (["b", "c"], (1 + 2 / math.log2(3)) / IDEAL),
        (["x", "c", "b"], 1.0),  # excluded ids are removed before the cut-off
        (["a", "d"], 0.0),
        ([f"n{i}" for i in range(10)] + ["c", "b"], 0.0),  # relevant documents past rank 10 earn nothing
        ([], 0.0),
    ],
)
def test_ndcg_of_the_final_ranking(ranking: list[str], expected: float) -> None:
    assert memora_ndcg(ranking_episode(ranking)) == pytest.approx(expected)


def test_unfinished_episode_and_first_stage() -> None:
    episode = Episode("bright", ["t"], [memora_ev.first_stage("q", ["b", "a"], [2.0, 1.0])], QRELS)
    assert memora_ndcg(episode) == 0.0 and memora_ndcg(episode, unfinished=-1.0) == -1.0
    assert memora_first_stage_ndcg(episode) == pytest.approx(1 / IDEAL)
    assert memora_first_stage_ndcg(ranking_episode(["c"])) is None
    with pytest.raises(ValueError, match="qrels"):
        memora_ndcg(Episode("bright", [], [], {"answer": "x"}))


def test_action_cost_and_format() -> None:
    events = [ev.action(0, "extract", True), ev.action(1, "invalid", False), ev.action(2, "judge", True)]
    events.append(ev.format_error(1, "no_action"))
    episode = Episode("bright", ["a", "b", "c"], events, QRELS)
    assert memora_action_cost(episode) == pytest.approx(-0.03)
    assert memora_action_cost(episode, judge=1.0, invalid=0.5) == pytest.approx(-1.51)
    assert memora_format(episode) == 0.0 and memora_format(episode, mode="fraction") == pytest.approx(2 / 3)
    violated = Episode(
        "bright", ["a"], [ev.action(0, "judge", True), ev.protocol_violation(0, "bad_candidate")], QRELS
    )
    assert memora_format(violated) == 0.0 and memora_format(violated, count_violations=False) == 1.0
    # A turn the env never saw (cut by the length budget) is parsed here.
    assert memora_format(Episode("bright", ["<reason>r</reason><stop></stop>", "junk"], [], QRELS)) == 0.0


def test_spamming_actions_costs_more_than_it_can_earn() -> None:
    """Reward hacking: the same ranking reached with 40 extra calls scores less."""
    recipe = Rubric.from_recipe("recipes/rewards/memora.yaml")
    lean, spam = ranking_episode(["c", "b"], turns=2), ranking_episode(["c", "b"], turns=40)
    assert recipe.score(lean).total > recipe.score(spam).total


def test_recipe_on_a_real_episode_logs_first_stage_actions_and_memory_hits() -> None:
    env = MemoraEnv()
    _, info = env.reset(seed=3)
    query_qrels = {d: 1 for d in info["events"][1]["ranking"][5:8]}  # relevant docs at first-stage ranks 6-8
    _, _, _, _, info = env.step("<reason>r</reason><judge>6 > 7 > 8</judge>")
    _, _, _, _, info = env.step("<reason>r</reason><stop></stop>")
    episode = Episode("synthetic_memora", ["a", "b"], info["events"], {"qrels": query_qrels})
    result = Rubric.from_recipe("recipes/rewards/memora.yaml").score(episode)
    assert result.breakdown["ndcg"] == pytest.approx(1.0)
    assert result.breakdown["first_stage_ndcg"] < 0.6
    assert result.breakdown["num_actions"] == 2.0 and result.breakdown["memory_hits"] is not None
    assert result.total == pytest.approx(1.0 - 0.02 + 0.2)
