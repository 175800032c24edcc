"""``ragym ablate verification`` end to end on a budget of seconds: real warm start, GRPO and evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rl.ablate.cli import main

TINY = [
    "--steps", "1", "ragym.demo.warm_start.num_episodes=2", "ragym.demo.warm_start.epochs=1",
    "data.val_max_samples=2", "data.train_batch_size=1", "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
]  # fmt: skip
"""A budget that runs the whole grid in about a minute: it checks the plumbing, not the directions."""


@pytest.mark.slow
def test_verification_grid_runs_every_variant(tmp_path: Path) -> None:
    assert main(["verification", "--out", str(tmp_path), "--seeds", "1", *TINY]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["variants"]) == {"full", "rerank_only", "neither"}
    for stats in results["variants"].values():
        assert 0.0 <= stats["ident_acc"]["mean"] <= 1.0 and len(stats["ident_acc"]["per_seed"]) == 1
    # Each run also evaluated the policy its GRPO started from; the report shows both tables.
    assert set(results["before_grpo"]) == set(results["variants"])
    assert all(len(b["ident_acc"]["per_seed"]) == 1 for b in results["before_grpo"].values())
    assert "Before GRPO" in (tmp_path / "report.md").read_text()
    runs = tmp_path / "runs"
    assert (runs / "full" / "seed_0" / "warm_start" / "warm_start.json").is_file()
    # rerank_only starts GRPO from full's warm start; neither (no check in its prompt) warm-starts on its own.
    assert not (runs / "rerank_only" / "seed_0" / "warm_start").exists()
    assert (runs / "neither" / "seed_0" / "warm_start" / "warm_start.json").is_file()
    for name in ("rerank_only", "neither"):
        assert (runs / name / "seed_0" / "result.json").is_file()
    rows = pd.read_parquet(tmp_path / "rows" / "neither" / "test.parquet")
    kwargs = json.loads(rows["extra_info"].iloc[0]["env_kwargs"])
    # Table 5's "w/o Rerank, w/o Reject": the Rerank action is gone (not the demo's visual hint).
    assert (kwargs["verification_actions"], kwargs["max_rejections"], kwargs["visual_check_accuracy"]) == (
        False,
        0,
        0.8,
    )
    # A second call finds every run finished and only re-aggregates.
    before = (runs / "neither" / "seed_0" / "result.json").stat().st_mtime
    assert main(["verification", "--out", str(tmp_path), "--seeds", "1", *TINY]) == 0
    assert (runs / "neither" / "seed_0" / "result.json").stat().st_mtime == before
