"""benchmarks/async_rollouts.py's report: per-mode figures, the async/sync ratios beside the overlap ceiling, and the
learning curve over seeds."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.async_rollouts import Run, _describe, _report


def _runs() -> dict[str, list[Run]]:
    # Sync: a 4 s first step (2 s of it a one-off set-up), then 2 s steps, waiting 1 s of each for its episodes.
    # Async: a 2 s first step, then 1.25 s steps that hardly wait.
    sync = [
        Run(
            step_s=[4.0, 2.0, 2.0],
            idle_s=[1.0, 1.0, 1.0],
            trajectories=24,
            val_reward=v,
            rewards=[0.1, 0.2, r],
        )
        for v, r in ((0.5, 0.3), (0.7, 0.5))
    ]
    fast = [
        Run(
            step_s=[2.0, 1.25, 1.25],
            idle_s=[0.5, 0.0, 0.0],
            trajectories=24,
            val_reward=v,
            rewards=[0.1, 0.3, r],
            staleness=Counter({0: 8, 1: 16}),
        )
        for v, r in ((0.6, 0.4), (0.6, 0.6))
    ]
    return {"sync": sync, "async": fast}


def test_a_modes_figures_are_totals_over_its_runs() -> None:
    sync = _describe(_runs()["sync"])
    # The steady state leaves out each run's first step.
    assert sync["step_s"] == pytest.approx(8 / 3) and sync["steady_step_s"] == pytest.approx(2.0)
    assert sync["idle"] == pytest.approx(3 / 8) and sync["steady_idle"] == pytest.approx(0.5)
    assert sync["traj_per_s"] == pytest.approx(3.0)
    assert sync["val_reward"] == pytest.approx(0.6) and sync["val_spread"] == pytest.approx(0.2)
    fast = _describe(_runs()["async"])
    assert fast["steady_step_s"] == pytest.approx(1.25) and fast["step_s"] == pytest.approx(1.5)


def test_the_report_gives_each_ratio_its_ceiling_and_the_curve_per_mode(
    capsys: pytest.CaptureFixture,
) -> None:
    _report("heavy", _runs())
    out = capsys.readouterr().out
    # Per seed: 8 s of sync against 4.5 s of async, 4 s against 2.5 s over the steady steps. Sync waited half of each
    # steady step, so one batch ahead gains at most 2x there (its first step's set-up is neither rollout nor update:
    # over all steps, idle 3/8 would say 1.6x).
    assert "ratio async/sync per seed: 1.78x 1.78x (median 1.78x; steady 1.60x 1.60x, ceiling 2.00x)" in out
    assert "steps/s 1.78x (steady 1.60x), traj/s 1.78x, held-out reward +0.000" in out
    assert "idle 38% (50% steady)" in out
    assert "async staleness: {0: 16, 1: 32} trajectories" in out
    assert " sync training reward per step (mean over seeds): 0.100 0.200 0.400" in out
    assert "async training reward per step (mean over seeds): 0.100 0.300 0.500" in out
