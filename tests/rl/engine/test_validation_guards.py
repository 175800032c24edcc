"""Guards on held-out metrics in the local engine's loop: checked at each evaluation (``trainer.test_freq``) and
only there, counting evaluations; the baseline evaluation before training is not checked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ragym.rl.core.metrics import MetricsSink, read_metrics
from ragym.rl.engine.trainer import LocalTrainer
from ragym.rl.guards import GuardMonitor, GuardStop, read_firings, read_guards
from tests.rl.engine.test_engine_trainer import _overrides, tiny_setup  # noqa: F401  (a module fixture)

GUARDS = {
    "val_ident_floor": {"action": "stop", "threshold": 0.5, "steps": 2},
    "val_reject_all": {"action": "warn", "steps": 1},
    "entropy_floor": {"action": "warn", "threshold": 0.05, "steps": 1},
}


class StreamTrainer(LocalTrainer):
    """The local engine's ``fit`` and ``validate`` over made-up metrics: no model, each training step logs a
    healthy entropy, each evaluation returns the next of ``evaluations`` (Ident., rejections, confirmations)."""

    def __init__(self, out, evaluations, test_freq: int, total_steps: int) -> None:
        self.cfg = SimpleNamespace(
            total_steps=total_steps, test_freq=test_freq, val_before_train=True, save_freq=0
        )
        self.step, self.val_rows, self.saved = 0, ["a held-out row"], []
        self.evaluations = list(evaluations)
        self.guards = GuardMonitor(read_guards(GUARDS), out)
        self.sink = MetricsSink(out, [], "ragym", "test", {})

    def train_step(self, prefetch: bool | None = None) -> dict[str, float]:
        self.step += 1
        metrics = {"reward/total": 1.0, "actor/entropy": 0.5}
        self.guards.check(self.step, metrics)
        self.sink.log(self.step, metrics)
        return metrics

    def evaluate(self, rows=None) -> dict[str, float]:
        ident, reject, rerank = self.evaluations.pop(0)
        return {
            "episode/ident_acc": ident,
            "episode/actions/reject": reject,
            "episode/actions/rerank": rerank,
        }

    def save(self) -> None:
        self.saved.append(self.step)


def test_a_held_out_floor_fires_after_n_evaluations_not_n_steps(tmp_path):
    # Baseline (every decision a Reject, Ident. 0: not checked), then evaluations at steps 3, 6, 9.
    evaluations = [(0.0, 3.0, 0.0), (0.9, 0.2, 1.0), (0.3, 0.5, 1.0), (0.1, 1.0, 1.0)]
    trainer = StreamTrainer(tmp_path, evaluations, test_freq=3, total_steps=12)
    with pytest.raises(GuardStop) as stopped:
        trainer.fit()
    assert str(stopped.value) == (
        "guard val_ident_floor fired at step 9: val/episode/ident_acc < 0.5 for 2 "
        "evaluations (0.300, 0.100) (action: stop)"
    )
    assert trainer.step == 9 and trainer.saved == [9]  # the stopped step is checkpointed, nothing trains on
    records = read_metrics(tmp_path / "metrics.jsonl")
    held_out = [(r["step"], r.get("guard/val_ident_floor")) for r in records if "val/episode/ident_acc" in r]
    assert held_out == [(0, None), (3, 0.0), (6, 0.0), (9, 1.0)]
    # Training records carry only the training guards; evaluations only the held-out ones.
    assert all("guard/val_ident_floor" not in r for r in records if "actor/entropy" in r)
    assert all("guard/entropy_floor" not in r for r in records if "val/episode/ident_acc" in r)
    assert [(f["guard"], f["step"]) for f in read_firings(tmp_path)] == [("val_ident_floor", 9)]


def test_held_out_guards_fire_on_none_of_a_healthy_run(tmp_path):
    evaluations = [(0.0, 3.0, 0.0), (0.6, 1.0, 1.0), (0.7, 0.9, 1.0), (0.8, 0.9, 1.0)]
    trainer = StreamTrainer(tmp_path, evaluations, test_freq=2, total_steps=6)
    trainer.fit()
    assert trainer.step == 6 and read_firings(tmp_path) == []


def test_reject_everything_on_held_out_rows_warns(tmp_path):
    evaluations = [(0.0, 3.0, 0.0), (0.8, 0.9, 1.0), (0.8, 2.0, 0.0)]
    trainer = StreamTrainer(tmp_path, evaluations, test_freq=2, total_steps=4)
    trainer.fit()
    assert [(f["guard"], f["step"], f["action"]) for f in read_firings(tmp_path)] == [
        ("val_reject_all", 4, "warn")
    ]


def test_the_local_engine_checks_held_out_guards_on_its_own_evaluations(tiny_setup, tmp_path):  # noqa: F811
    """The real loop on a tiny policy: an Ident. floor no policy can reach (2.0) stops the run at the second
    evaluation, logged in its own record after the step's training record."""
    from ragym.rl.train import build_trainer

    overrides = [
        *_overrides(tiny_setup, tmp_path, steps=3),
        "trainer.test_freq=1",
        "trainer.save_freq=-1",
        "ragym.guards.val_ident_floor.action=stop",
        "ragym.guards.val_ident_floor.threshold=2.0",
        "ragym.guards.val_ident_floor.steps=2",
    ]
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    try:
        with pytest.raises(
            GuardStop, match=r"^guard val_ident_floor fired at step 2: val/episode/ident_acc < 2.0 "
        ):
            trainer.fit()
    finally:
        trainer.close()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], "val/episode/ident_acc" in r, r.get("guard/val_ident_floor")) for r in records] == [
        (1, False, None),
        (1, True, 0.0),
        (2, False, None),
        (2, True, 1.0),
    ]
    assert (tmp_path / "global_step_2").is_dir()
