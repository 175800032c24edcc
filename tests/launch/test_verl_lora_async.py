"""LoRA under ragym's async trainer modes on CPU, for real: ``ragym train --engine verl --toy`` with ``lora_rank`` set
and ``trainer.v1.trainer_mode`` ``ragym_colocate_async`` (verl's in-process sync: the base weights once, then the
adapters) or ``ragym_separate_async`` (a standalone replica fed through ``ragym_object_store``, where verl 0.9.1
alone sent the base weights without the adapters, volcengine/verl#7495). After two updates the rollout's log-probs
of its samples are the trainer's (``rollout_probs_diff_mean`` within the full-weight runs' bound), and the same run
with a planted fault (the rollout takes every sync but loads no adapters) fails that check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ragym.rl.verl_plugin.verl_local import console_step_metrics
from tests.launch.conftest import RayHead
from tests.launch.test_verl_trainer import PROBS_DIFF_BOUND, ragym

pytestmark = pytest.mark.ray

RECIPE = "kbvqa_qwen2_5_vl_7b"
LORA = (
    "actor_rollout_ref.model.lora_rank=8",
    "actor_rollout_ref.model.lora_alpha=32",
    # Large enough that a rollout serving the initial adapters (lora_B zero) shows after one update: the planted
    # fault measured rollout_probs_diff_mean 0.059 at step 2 and 0.359 at step 3, the delivered adapters 0.002-0.003.
    "actor_rollout_ref.actor.optim.lr=1e-2",
    "trainer.v1.sampler.max_off_policy_threshold=2",
)
"""LoRA runs of the async modes whose ``rollout_probs_diff_mean`` measures delivery alone: no warm-up batch
(``num_warmup_batches=0``), so every trajectory comes from the weights the trainer holds (staleness 0) and a
difference can only be a rollout serving other adapters. (With a warm-up batch the difference would include one
update of staleness.)"""
FAULT = "tests.launch.lora_fault"
"""The planted fault, loaded into every process of the run (``VERL_USE_EXTERNAL_MODULES``)."""
SYNC_LINE = re.compile(r"step (\d+) weight sync: \d+ tensors, [\d.]+ MB \(([a-z +]+)\)")


def lora_run(
    toy: Path,
    mode: str,
    steps: int,
    fault: bool,
    monkeypatch: pytest.MonkeyPatch,
    head: RayHead | None = None,
) -> tuple[dict, str, Path]:
    """A LoRA run of ``ragym_<mode>_async`` (with the planted fault or not): its metrics per step, log and folder.
    The planted fault's runs start a Ray of their own (``head`` None): its workers must inherit the fault's
    ``VERL_USE_EXTERNAL_MODULES``, which a running Ray's do not."""
    out = toy / "lora_async" / f"{mode}_{'fault' if fault else 'ok'}"
    if fault:
        monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", FAULT)
        monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # Ray's workers import it
    log = ragym(
        "train",
        "--engine",
        "verl",
        "--recipe",
        RECIPE,
        "--toy",
        str(toy),
        "--network",
        "host" if head else "private",
        f"trainer.v1.trainer_mode=ragym_{mode}_async",
        f"trainer.v1.{mode}_async.num_warmup_batches=0",
        f"trainer.total_training_steps={steps}",
        f"trainer.default_local_dir={out}",
        *LORA,
        cwd=toy,
        head=head,
    )
    metrics = console_step_metrics(log)
    assert sorted(metrics) == list(range(1, steps + 1)), f"steps seen: {sorted(metrics)}"
    diffs = [round(metrics[step]["training/rollout_probs_diff_mean"], 4) for step in sorted(metrics)]
    print(f"{mode}_async LoRA{' with the planted fault' if fault else ''}: rollout_probs_diff_mean {diffs}")
    assert all(m["training/off_policy/trajectory_staleness_worst/max"] == 0 for m in metrics.values()), (
        metrics
    )
    return metrics, log, out


@pytest.mark.parametrize("mode", ["colocate", "separate"])
def test_the_async_lora_rollout_serves_the_trained_adapters(
    toy: Path, mode: str, monkeypatch, ray_head: RayHead
) -> None:
    metrics, log, out = lora_run(toy, mode, 3, fault=False, monkeypatch=monkeypatch, head=ray_head)
    diffs = [metrics[step]["training/rollout_probs_diff_mean"] for step in (1, 2, 3)]
    assert all(diff <= PROBS_DIFF_BOUND for diff in diffs), diffs
    assert any(m["actor/grad_norm"] > 0 for m in metrics.values())
    # Adapters reached the rollout at every sync: colocate_async's base weights, then adapters; separate_async's
    # base weights and adapters at once, then adapters.
    kinds = [kind for _, kind in SYNC_LINE.findall(log)]
    assert kinds.count("adapters") >= 3 and "full weights" not in kinds, kinds
    recorded = [json.loads(line) for line in (out / "traces" / "episodes.jsonl").read_text().splitlines()]
    # Every traced episode names the adapters' version that generated it, each turn too: the trainer's, each step.
    assert {(r["step"], *r["weight_versions"]) for r in recorded} == {(1, 0, 0), (2, 1, 1), (3, 2, 2)}
    assert all(r["turn_weight_versions"] == [r["weight_versions"]] * len(r["turns"]) for r in recorded)
    assert all(m["off_policy/resumed_turn_share"] == 0 for m in metrics.values())


@pytest.mark.parametrize("mode", ["colocate", "separate"])
def test_a_rollout_that_skips_the_adapters_fails_the_agreement_check(
    toy: Path, mode: str, monkeypatch
) -> None:
    metrics, log, _ = lora_run(toy, mode, 2, fault=True, monkeypatch=monkeypatch)
    assert "planted fault" in log
    # Step 1 samples from the initial adapters on both sides; after one update the rollout's initial policy parts
    # from the trainer's.
    assert metrics[1]["training/rollout_probs_diff_mean"] <= PROBS_DIFF_BOUND
    assert metrics[2]["training/rollout_probs_diff_mean"] > PROBS_DIFF_BOUND, metrics[2]
