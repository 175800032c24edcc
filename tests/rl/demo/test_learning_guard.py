"""The guard on the demo's learning: the demo's own warm start and a few GRPO steps must move its decision.

The demo's held-out Ident. is greedy, so it moves only when P(confirm a match) crosses ~0.5 (about step 17 of
30 on seed 0): a short run cannot read learning off it. The decision margin (``ragym.rl.demo.margin``) is the
probability itself, so a short run on a fixed seed must raise it by a clear step, whatever the CPU's kernels
(docs/results.md, "Why the demo's learning was fragile": +0.20 to +0.35 in 10 steps on seeds 0-3). A broken
advantage, loss mask, optimizer or reward turns the rise into noise around zero and fails this test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GUARD_STEPS = 10
"""GRPO steps of the guard run (the demo runs 30)."""
MIN_RISE = 0.1
"""Least rise of the mean P(confirm a match) over the guard run (measured +0.20 to +0.35 in 10 steps, seeds 0-3;
GRPO without a signal drifts by a few hundredths)."""


@pytest.mark.slow
def test_a_short_grpo_run_raises_the_demo_policys_confirmation_of_matches(tmp_path: Path) -> None:
    from ragym.rl.demo.run import WARM_PROBE, prepare, probe_policy
    from ragym.rl.engine.config import read_engine_config
    from ragym.rl.engine.trainer import LocalTrainer

    overrides = ["trainer.logger=[console]", "trainer.save_freq=-1"]
    # The demo's recipe and warm start as `make demo` runs them (prepare also holds the warm start to its target).
    config, reader, _ = prepare(tmp_path, seed=0, steps=GUARD_STEPS, extra_overrides=overrides)
    trainer = LocalTrainer(config, read_engine_config(reader))
    trainer.fit()
    trainer.save_model(tmp_path / "after")
    trainer.close()
    before = json.loads((tmp_path / "warm_start" / WARM_PROBE).read_text())
    after = probe_policy(tmp_path / "after", config, reader)
    rise = after["confirm_match"]["mean"] - before["confirm_match"]["mean"]
    assert rise >= MIN_RISE, (
        f"P(confirm a match) {before['confirm_match']['mean']:.3f} -> {after['confirm_match']['mean']:.3f}"
    )
    # Learning to confirm matches must not come from confirming everything.
    assert after["reject_no_match"]["mean"] >= 0.9
    assert after["other"]["greedy_share"] >= 0.95  # the protocol's tokens stay the argmax
