"""R3G's own evaluation summary (``ragym.envs.r3g.report``): every R3G episode counted, a failed one as wrong."""

from __future__ import annotations

from ragym.envs import events as ev
from ragym.envs.r3g import events as r3g_ev
from ragym.envs.r3g.report import markdown, r3g_summary

TASK = r3g_ev.r3g_task(["g"], "Angle", 2, 1, "fused", True)
RANKED = [
    TASK,
    r3g_ev.evidence_selected(1, ["x", "g"], [0.5, 0.5], [0.0, 1.0], [0.5, 1.5], [1], ["g"], "fused"),
]
"""An episode whose final ranking puts the gold image first."""


def test_an_episode_the_env_ended_by_raising_recalls_nothing() -> None:
    crashed = [*RANKED, ev.episode_error(2, "step", "boom")]  # ranked, then the answer step raised
    summary = r3g_summary([(RANKED, 1.0), (crashed, 0.0)])
    assert summary is not None
    assert (summary["all"]["accuracy"], summary["all"]["recall@1"], summary["all"]["recall@5"]) == (
        0.5,
        0.5,
        0.5,
    )


def test_an_episode_whose_env_could_not_start_is_counted_wrong_in_all() -> None:
    unstarted = [ev.episode_error(-1, "reset", "no such image")]
    summary = r3g_summary([(RANKED, 1.0), (unstarted, 0.0)])
    assert summary is not None
    overall = summary["all"]
    assert (overall["num_episodes"], overall["num_not_started"]) == (2, 1)
    assert (overall["accuracy"], overall["recall@1"], overall["gold_in_pool"]) == (0.5, 0.5, 0.0)
    assert list(summary["by_scenario"]) == ["Angle"]  # only its task event names a scenario
    assert summary["by_scenario"]["Angle"]["num_episodes"] == 1
    assert "1 episodes whose env could not start are in all only." in markdown({"policy": summary})
