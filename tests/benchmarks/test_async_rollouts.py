"""benchmarks/async_rollouts.py's report: per-mode figures, the async/sync ratios beside the overlap ceiling, and the
learning curve over seeds."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.async_rollouts import Run, _describe, _report


def _runs() -> dict[str, list[Run]]:
    # Sync: 2 s steps, half of each waiting for episodes. Async: its first step as sync's, then 1 s steps.
    sync = [Run(step_s=[2.0, 2.0, 2.0], idle_s=3.0, trajectories=24, val_reward=v, rewards=[0.1, 0.2, r])
            for v, r in ((0.5, 0.3), (0.7, 0.5))]  # fmt: skip
    fast = [Run(step_s=[2.0, 1.0, 1.0], idle_s=0.5, trajectories=24, val_reward=v, rewards=[0.1, 0.3, r],
                staleness=Counter({0: 8, 1: 16})) for v, r in ((0.6, 0.4), (0.6, 0.6))]  # fmt: skip
    return {"sync": sync, "async": fast}


def test_a_modes_figures_are_totals_over_its_runs() -> None:
    sync = _describe(_runs()["sync"])
    assert sync["step_s"] == pytest.approx(2.0) and sync["steady_step_s"] == pytest.approx(2.0)
    assert sync["idle"] == pytest.approx(0.5) and sync["traj_per_s"] == pytest.approx(4.0)
    assert sync["val_reward"] == pytest.approx(0.6) and sync["val_spread"] == pytest.approx(0.2)
    fast = _describe(_runs()["async"])
    # Steady state leaves out each run's first step: 1 s, against 4/3 s over all steps.
    assert fast["steady_step_s"] == pytest.approx(1.0) and fast["step_s"] == pytest.approx(4 / 3)


def test_the_report_gives_each_ratio_its_ceiling_and_the_curve_per_mode(
    capsys: pytest.CaptureFixture,
) -> None:
    _report("heavy", _runs())
    out = capsys.readouterr().out
    # Per seed: 6 s of sync against 4 s of async; sync waited half its step, so one batch ahead gains at most 2x.
    assert "ratio async/sync per seed: 1.50x 1.50x (median 1.50x; ceiling 2.00x)" in out
    assert "steps/s 1.50x (steady 2.00x), traj/s 1.50x, held-out reward +0.000" in out
    assert "async staleness: {0: 16, 1: 32} trajectories" in out
    assert " sync training reward per step (mean over seeds): 0.100 0.200 0.400" in out
    assert "async training reward per step (mean over seeds): 0.100 0.300 0.500" in out
