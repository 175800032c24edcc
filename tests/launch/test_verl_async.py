"""ragym's async trainer modes on verl's own trainer, for real: ``ragym train --engine verl --toy`` with
``trainer.v1.trainer_mode`` set to each async mode (one line: on CPU, ``ragym train`` adds what separate_async
needs beyond it, ``recipes/platforms/cpu_separate_async.yaml``): colocate_async on DocMemo's paper recipe, 2 steps,
then a resume to step 3, export and eval; separate_async on MEMORA's, 3 steps in one run, export and eval (the
resume is code the two modes share). These are DocMemo's and MEMORA's verl runs too, with every check a run makes of
its env (``check_run_files``): a verl run costs minutes of CPU, mostly start-ups, so one run carries an env and a
mode. KB-VQA runs in each async mode with LoRA (``test_verl_lora_async.py``).

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

from ragym.envs.hooks import env_hooks
from ragym.rl.core.metrics import METRICS_FILE
from ragym.rl.guards import RUN_CHECKS
from ragym.rl.verl_plugin.trainer import trajectory_staleness
from tests.launch.conftest import RayHead
from tests.launch.test_verl_trainer import CORRECTION_KEYS, check_run_files, export_and_eval, train

pytestmark = pytest.mark.ray

ENV_OF_MODE = {"ragym_colocate_async": "DocMemo-v0", "ragym_separate_async": "MEMORA-v0"}
"""The env whose paper recipe each async mode's run trains (``test_verl_trainer.VERL_RUN_OF_ENV``)."""
BOUND = 2
"""``max_off_policy_threshold``: a trajectory may span 2 weight versions, so it is at most 1 update old."""
RAGYM_KEYS = {
    "reward/total",
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
        assert {k for k in m if k.startswith("reward/")} - {"reward/total"}, sorted(m)  # the rubric's terms
        assert m["reward/total"] == pytest.approx(m["critic/score/mean"], abs=1e-5)
        assert 0 <= m["training/off_policy/trajectory_staleness_worst/max"] <= BOUND - 1, m
        assert m["off_policy/dropped_stale_groups"] == m.get("training/off_policy/evicted_samples", 0)
        # The correction is on in async modes (ragym.off_policy_correction: auto): verl weighed the loss.
        assert "rollout_corr/rollout_is_mean" in m, sorted(k for k in m if k.startswith("rollout_corr/"))
        # DocMemo's and MEMORA's toy rows are text: images, where a row has them, reach the batch as tokens (KB-VQA's
        # in every async mode: test_verl_lora_async.py).
        assert (m["images/per_episode"] > 0) == (m["images/tokens_per_episode"] > 0), m
        assert all(m[f"guard/{name}"] == 0 for name in RUN_CHECKS), m


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


EPOCHS = 4
"""Passes over the toy rows a run may take: DocMemo's toy set is 6 rows, one batch of 4 an epoch, and 3 steps with
the async modes' warm-up batch take 4 (the recipes' 2 epochs stopped a resumed run before its step 3)."""


def overrides(mode: str, out: Path) -> list[str]:
    return [
        f"trainer.v1.trainer_mode={mode}",
        f"trainer.v1.sampler.max_off_policy_threshold={BOUND}",
        f"trainer.default_local_dir={out}",
        f"trainer.total_epochs={EPOCHS}",
    ]


def test_colocate_async_two_steps_resume_export_and_eval(toy: Path, ray_head: RayHead) -> None:
    mode = "ragym_colocate_async"
    env_id = ENV_OF_MODE[mode]
    recipe = env_hooks(env_id).paper_recipe
    out = toy / "async" / mode
    metrics = train(recipe, toy, *overrides(mode, out), head=ray_head)
    check_steps(metrics, [1, 2])
    recorded = check_overlap(out, metrics)
    assert {r["step"] for r in recorded} == {1, 2}

    resumed = train(recipe, toy, *overrides(mode, out), "trainer.total_training_steps=3", head=ray_head)
    check_steps(resumed, [3])
    # The file holds each step once: the first run's two, the resumed run's third after them.
    assert [json.loads(line)["step"] for line in (out / METRICS_FILE).read_text().splitlines()] == [1, 2, 3]
    check_synced(check_run_files(toy, out, env_id, [1, 2, 3]))
    export_and_eval(toy, out, mode, env_id)


def test_separate_async_three_steps_export_and_eval(toy: Path, ray_head: RayHead) -> None:
    """One run of 3 steps (the resume is the colocate test's: the same code in both async modes)."""
    mode = "ragym_separate_async"
    env_id = ENV_OF_MODE[mode]
    out = toy / "async" / mode
    metrics = train(
        env_hooks(env_id).paper_recipe,
        toy,
        *overrides(mode, out),
        "trainer.total_training_steps=3",
        head=ray_head,
    )
    check_steps(metrics, [1, 2, 3])
    check_overlap(out, metrics)
    check_synced(check_run_files(toy, out, env_id, [1, 2, 3]))
    export_and_eval(toy, out, mode, env_id)
