"""MEMORA-v0 episode metrics from events (hand-checked on a toy episode) (the agent loop on it: tests/rl/agent_loop)."""

from __future__ import annotations

import pytest

from ragym.envs.metrics import episode_metrics
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
