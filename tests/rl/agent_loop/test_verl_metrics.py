"""ragym's step metrics from verl's per-trajectory extra fields: the local engine's keys and values."""

from __future__ import annotations

import pytest

from ragym.rl.agent_loop.verl_metrics import step_metrics


def _fields(score: float, outcome: float, errors: float, searches: float | None) -> dict:
    metrics = {"errors": errors, "turns": 2.0} | ({} if searches is None else {"searches": searches})
    info = {"score": score, "reward/outcome": outcome, "reward/format": 1.0, "acc": score}
    return {"reward_extra_info": info, "episode_metrics": metrics, "events": []}


def test_terms_episode_metrics_and_flat_groups_are_batch_means():
    fields = [
        _fields(1.5, 1.0, 0.0, 2.0),
        _fields(0.5, 0.0, 0.0, 4.0),  # group a: rewards differ
        _fields(0.0, 0.0, 1.0, None),
        _fields(0.0, 0.0, 1.0, None),
    ]  # group b: two error episodes
    metrics = step_metrics(fields, ["a", "a", "b", "b"])
    assert metrics["reward/total"] == pytest.approx(0.5)
    assert metrics["reward/outcome"] == pytest.approx(0.25) and metrics["reward/format"] == 1.0
    assert metrics["episode/errors"] == 0.5 and metrics["episode/turns"] == 2.0
    assert metrics["episode/searches"] == 3.0  # over the episodes where it applies
    assert metrics["grpo/zero_adv_group_share"] == 0.5
    assert "reward/acc" not in metrics and "acc" not in metrics


def test_a_trajectory_without_ragym_scores_is_an_error():
    with pytest.raises(ValueError, match="ragym.rewards.verl.compute_score"):
        step_metrics([{"reward_extra_info": {}, "episode_metrics": {}}], ["a"])
    with pytest.raises(ValueError, match="1 trajectories but 2 group ids"):
        step_metrics([_fields(1.0, 1.0, 0.0, 1.0)], ["a", "b"])
