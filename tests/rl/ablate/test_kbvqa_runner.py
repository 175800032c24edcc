"""``ragym ablate verification`` end to end on a budget of seconds: real warm start, GRPO and evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ragym.rl.ablate.cli import main

TINY = [
    "--steps",
    "1",
    "ragym.demo.warm_start.num_episodes=2",
    "ragym.demo.warm_start.epochs=1",
    "data.val_max_samples=2",
    "data.train_batch_size=1",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "--task",
    "verify",
    "--jobs",
    "1",
    "ragym.demo.warm_start_target.action=warn",
]
"""A budget that runs the whole grid in about a minute: it checks the plumbing, not the directions (the verify
task, one run at a time: the answer task's copy pretraining alone takes minutes)."""


@pytest.mark.slow
def test_verification_grid_runs_every_variant(tmp_path: Path) -> None:
    assert main(["verification", "--out", str(tmp_path), "--seeds", "1", *TINY]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["variants"]) == {"full", "rerank_only", "neither", "full_paid_at_limit"}
    for stats in results["variants"].values():
        assert 0.0 <= stats["ident_acc"]["mean"] <= 1.0 and len(stats["ident_acc"]["per_seed"]) == 1
    # Each run also evaluated the policy its GRPO started from; the report shows both tables.
    assert set(results["before_grpo"]) == set(results["variants"])
    assert all(len(b["ident_acc"]["per_seed"]) == 1 for b in results["before_grpo"].values())
    assert "Before GRPO" in (tmp_path / "report.md").read_text()
    runs = tmp_path / "runs"
    assert (runs / "full" / "seed_0" / "warm_start" / "warm_start.json").is_file()
    # rerank_only (no Reject in its prompt) and neither (no Rerank) warm-start on their own prompts.
    # Each from the first variant's tiny policy of the seed (copied, not built again): the same initial weights.
    from safetensors.torch import load_file

    first = load_file(runs / "full" / "seed_0" / "tiny_policy" / "model.safetensors")
    for name in ("rerank_only", "neither"):
        assert (runs / name / "seed_0" / "warm_start" / "warm_start.json").is_file()
        assert (runs / name / "seed_0" / "result.json").is_file()
        own = load_file(runs / name / "seed_0" / "tiny_policy" / "model.safetensors")
        assert own.keys() == first.keys() and all(own[k].equal(first[k]) for k in first)
    assert not (runs / "full_paid_at_limit" / "seed_0" / "warm_start").exists()  # GRPO from full's warm start
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


@pytest.mark.slow
def test_credit_grid_runs_every_variant_with_its_estimator_and_a_held_out_curve(tmp_path: Path) -> None:
    import torch

    tiny = ["--steps", "2", *TINY[2:]]
    assert main(["credit", "--out", str(tmp_path), "--seeds", "1", *tiny]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    names = ["grpo", "turn_credit", "grpo_dyn_sampling", "turn_credit_dyn_sampling"]
    assert list(results["variants"]) == names and set(results["grpo_movement"]["variants"]) == set(names)
    reach, groups = results["steps_to_target"], results["group_sampling"]
    assert reach["target_ident_acc"] == 0.79
    for name in names:
        run = json.loads((tmp_path / "runs" / name / "seed_0" / "result.json").read_text())
        # Evaluated before GRPO and at the last step (test_freq 5 > 2 steps); the last point is the result.
        assert [p["step"] for p in run["held_out_curve"]] == [0, 2]
        assert run["held_out_curve"][-1]["ident_acc"] == run["metrics"]["ident_acc"]
        assert run["held_out_curve"][0]["ident_acc"] == run["before_grpo"]["ident_acc"]
        assert reach["variants"][name]["per_seed"][0] in (None, 0, 2)
        # The run trained with the variant's estimator and filter (the checkpoint records its config).
        state = torch.load(
            tmp_path / "runs" / name / "seed_0" / "grpo" / "global_step_2" / "engine_state.pt",
            weights_only=False,
        )
        algorithm = json.loads(state["config"])["algorithm"]
        dynamic = name.endswith("_dyn_sampling")
        assert algorithm["adv_estimator"] == name.removesuffix("_dyn_sampling")
        assert algorithm["filter_groups"]["enable"] is dynamic and groups[name]["dynamic_sampling"] is dynamic
        assert (
            run["train_sampling"]["steps"] == 2 and 0.0 <= run["train_sampling"]["dropped_group_share"] <= 1.0
        )
        if not dynamic:
            assert groups[name]["dropped_group_share"] is None and run["train_sampling"]["gen_batches"] == 1.0
    report = (tmp_path / "report.md").read_text()
    assert "## Steps to the target: held-out ident_acc >= 0.79" in report and "steps 0, 2" in report
    assert (tmp_path / "curve.png").stat().st_size > 0
