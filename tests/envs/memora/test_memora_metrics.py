"""MEMORA-v0 episode metrics from events (hand-checked on a toy episode) (the agent loop on it: tests/rl/agent_loop)."""

from __future__ import annotations

import math

import pytest

from ragym.envs import events as ev
from ragym.envs.metrics import episode_metrics
from ragym.rewards import Episode, Rubric
from ragym.rl.core.metrics import summarize
from tests.envs.memora.test_memora import OPTIONS, play_factor_episode, small_env


def test_metrics_of_a_toy_episode(tmp_path) -> None:
    env = small_env(memory_dir=str(tmp_path))
    play_factor_episode(env, {**OPTIONS, "query": "gamma question"})
    info = play_factor_episode(
        env, {**OPTIONS, "query_id": "q2", "query": "gamma rays from quasars"}
    )  # sees q1
    metrics = episode_metrics("MEMORA-v0", info["events"])
    # K = 2: the final top 2 is c, d (c relevant) -> nDCG@2 = 1; the first stage's top 2 is a, b -> 0.
    assert metrics["ndcg"] == pytest.approx(1.0) and metrics["first_stage_ndcg"] == 0.0
    assert metrics["ndcg_gain"] == pytest.approx(1.0)
    assert (metrics["memory_hits"], metrics["memory_records"], metrics["memory_written"]) == (1.0, 1.0, 1.0)
    assert (metrics["actions"], metrics["factors"], metrics["evidence_edges"]) == (4.0, 2.0, 2.0)
    assert metrics["actions/extract"] == 2.0 and metrics["judged"] == 0.0 and metrics["forced_ranking"] == 0.0
    unscored = play_factor_episode(small_env(), {"query": "q"})
    assert episode_metrics("MEMORA-v0", unscored["events"])["ndcg"] is None


def test_a_crashed_episode_counts_in_ndcg_as_the_rubric_scores_it() -> None:
    played = play_factor_episode(small_env(), OPTIONS)["events"]  # nDCG@2 1 over a first stage of 0 (above)
    _, info = small_env().reset(options={**OPTIONS, "qrels": {"b": 1}})
    crashed = [*info["events"], ev.episode_error(0, "step", "boom")]
    unstarted = [ev.episode_error(-1, "reset", "no such corpus")]
    first = 1 / math.log2(3)  # the first stage's top 2 is a, b: b relevant at rank 2 of an ideal 1
    rubric = Rubric.from_recipe("recipes/rewards/memora.yaml")
    episodes = [(played, {"c": 1}), (crashed, {"b": 1}), (unstarted, {"c": 1})]
    results = [rubric.score(Episode("synthetic_memora", ["t"], e, {"qrels": q})) for e, q in episodes]
    metrics = [episode_metrics("MEMORA-v0", e) for e, _ in episodes]
    assert (metrics[1]["ndcg"], metrics[1]["first_stage_ndcg"]) == (0.0, pytest.approx(first))
    assert metrics[1]["ndcg_gain"] == pytest.approx(-first)
    training = summarize([r.total for r in results], [r.metrics() for r in results], metrics, ["g"] * 3)
    # Every episode in the denominator, the crashes at 0, as the rubric's own term counts them.
    assert training["episode/ndcg"] == pytest.approx(training["reward/ndcg"]) == pytest.approx(1 / 3)
    # The env that could not start ranked nothing and knew no first stage: both 0, its gain 0 (ragym.envs.metrics).
    assert training["episode/first_stage_ndcg"] == pytest.approx(first / 3)
    assert training["episode/ndcg_gain"] == pytest.approx((1.0 - first) / 3)
    without_qrels = [
        *small_env().reset(options={"query": "q"})[1]["events"],
        ev.episode_error(0, "step", "x"),
    ]
    assert episode_metrics("MEMORA-v0", without_qrels)["ndcg"] is None  # nDCG never applied to it
