"""ragym's async trainer modes on verl's own trainer, for real: ``ragym train --engine verl --toy`` on KB-VQA with
``trainer.v1.trainer_mode`` set to each async mode (one line: on CPU, ``ragym train`` adds what separate_async
needs beyond it, ``recipes/platforms/cpu_separate_async.yaml``): colocate_async 2 steps, then a resume to step 3,
export and eval; separate_async 3 steps in one run (resume, export and eval are code the two modes share).

Rollouts overlap training: verl dispatches a warm-up batch ahead of step 1, so step 2 trains on episodes the
weights before step 1 generated (one update old). ragym's additions must hold in every mode: the rubric's terms,
the episode metrics, the off-policy metrics, and a trace whose episodes carry the weight versions the rollout
tagged them with; verl's staleness metrics stay within the recipe's bound. ``separate_async`` serves rollouts
from a standalone replica on a second logical GPU, its weights synced through ``ragym_object_store``
(``ragym.rl.verl_plugin.weight_sync``). Each mode runs in a folder of its own, so the sync test's checkpoints are
left as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.rl.guards import RUN_CHECKS
from ragym.rl.verl_plugin.trainer import trajectory_staleness
from tests.launch.conftest import RayHead
from tests.launch.test_verl_trainer import CORRECTION_KEYS, export_and_eval, train

pytestmark = pytest.mark.ray

RECIPE = "kbvqa_qwen2_5_vl_7b"
ENV_ID = "KBVQA-v0"
BOUND = 2
"""``max_off_policy_threshold``: a trajectory may span 2 weight versions, so it is at most 1 update old."""
RAGYM_KEYS = {
    "reward/total",
    "reward/outcome",
    "episode/turns",
    "grpo/zero_adv_group_share",
    "off_policy/stale_share",
    "off_policy/dropped_stale_groups",
    "dynamic_sampling/flat_group_share",
    *CORRECTION_KEYS,
    "images/per_episode",
    "images/tokens_per_episode",
}


def check_steps(metrics: dict[int, dict[str, float]], steps: list[int]) -> None:
    """ragym's metrics at every step, and verl's staleness within the bound."""
    assert sorted(metrics) == steps, f"steps seen: {sorted(metrics)}"
    for m in metrics.values():
        assert RAGYM_KEYS <= m.keys(), sorted(RAGYM_KEYS - m.keys())
        assert m["reward/total"] == pytest.approx(m["critic/score/mean"], abs=1e-5)
        assert 0 <= m["training/off_policy/trajectory_staleness_worst/max"] <= BOUND - 1, m
        assert m["off_policy/dropped_stale_groups"] == m.get("training/off_policy/evicted_samples", 0)
        # The correction is on in async modes (ragym.off_policy_correction: auto): verl weighed the loss.
        assert "rollout_corr/rollout_is_mean" in m, sorted(k for k in m if k.startswith("rollout_corr/"))
        assert m["images/tokens_per_episode"] > 0 and all(m[f"guard/{name}"] == 0 for name in RUN_CHECKS), m


def check_overlap(out: Path, metrics: dict[int, dict[str, float]]) -> list[dict]:
    """Steps 1-2 of an async run: the update saw the warm-up batch's one-update-old episodes, and the trace's
    weight versions are the ones the rollout tagged; returns the trace's records."""
    assert any(m["actor/grad_norm"] > 0 for m in metrics.values()), metrics
    # Step 1 trains on the initial weights' episodes; step 2 on the warm-up batch's, generated during step 1's
    # update by the same weights, one update behind the trainer: the overlap that makes the mode async.
    assert metrics[1]["off_policy/stale_share"] == 0 and metrics[2]["off_policy/stale_share"] > 0, metrics
    recorded = [json.loads(line) for line in (out / "traces" / "episodes.jsonl").read_text().splitlines()]
    # The rollout tags each turn with the version of the weights it served (version v: after step v).
    assert all(
        r["staleness"] == trajectory_staleness(r["step"], tuple(r["weight_versions"])) for r in recorded
    )
    assert {tuple(r["weight_versions"]) for r in recorded if r["step"] == 1} == {(0, 0)}
    assert max(r["staleness"] for r in recorded if r["step"] == 2) == 1
    return recorded


def check_synced(recorded: list[dict]) -> None:
    """Step 3's episodes came from weights the trainer synced to the rollout after step 1 or 2, never from the
    initial ones (separate_async: through ragym_object_store to the standalone replica)."""
    assert {r["weight_versions"][0] for r in recorded if r["step"] == 3} <= {1, 2}, recorded[-1][
        "weight_versions"
    ]


def overrides(mode: str, out: Path) -> list[str]:
    return [
        f"trainer.v1.trainer_mode={mode}",
        f"trainer.v1.sampler.max_off_policy_threshold={BOUND}",
        f"trainer.default_local_dir={out}",
    ]


def test_colocate_async_two_steps_resume_export_and_eval(toy: Path, ray_head: RayHead) -> None:
    mode = "ragym_colocate_async"
    out = toy / "async" / mode
    metrics = train(RECIPE, toy, *overrides(mode, out), head=ray_head)
    check_steps(metrics, [1, 2])
    recorded = check_overlap(out, metrics)
    assert {r["step"] for r in recorded} == {1, 2}

    resumed = train(RECIPE, toy, *overrides(mode, out), "trainer.total_training_steps=3", head=ray_head)
    check_steps(resumed, [3])
    assert (out / "global_step_3" / "actor").is_dir()
    check_synced([json.loads(line) for line in (out / "traces" / "episodes.jsonl").read_text().splitlines()])
    export_and_eval(toy, out, mode, ENV_ID)


def test_separate_async_three_steps(toy: Path, ray_head: RayHead) -> None:
    """One run of 3 steps (resume, export and eval are the colocate test's: the same code in both async modes)."""
    mode = "ragym_separate_async"
    out = toy / "async" / mode
    metrics = train(RECIPE, toy, *overrides(mode, out), "trainer.total_training_steps=3", head=ray_head)
    check_steps(metrics, [1, 2, 3])
    check_synced(check_overlap(out, metrics))
