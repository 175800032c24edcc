"""LoRA under ragym's async trainer modes on CPU, for real: ``ragym train --engine verl --toy`` with ``lora_rank`` set
and ``trainer.v1.trainer_mode`` ``ragym_colocate_async`` (verl's in-process sync: the base weights once, then the
adapters) or ``ragym_separate_async`` (a standalone replica fed through ``ragym_object_store``, where verl 0.9.1
alone sent the base weights without the adapters, volcengine/verl#7495). One run per mode, as in
``test_verl_lora.py``: two steps on delivered adapters agree with the trainer, then the planted fault (the rollout
takes every sync from ``FAULT_FROM`` on but loads no adapters) parts the log-probs and fires the ``adapter_sync``
run check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.launch.test_verl_lora import STEPS, lora_run

pytestmark = pytest.mark.ray

ASYNC = ("trainer.v1.sampler.max_off_policy_threshold=2",)
"""With ``num_warmup_batches=0`` (below) every trajectory comes from the weights the trainer holds (staleness 0), so
``rollout_probs_diff_mean`` measures delivery alone; a warm-up batch would add one update of staleness."""
SYNC_LINE = re.compile(r"step (\d+) weight sync: \d+ tensors, [\d.]+ MB \(([a-z +]+)\)")


@pytest.mark.parametrize("mode", ["colocate", "separate"])
def test_the_async_lora_rollout_serves_the_trained_adapters_and_its_checks_see_the_fault(
    toy: Path, mode: str, monkeypatch
) -> None:
    overrides = (
        f"trainer.v1.trainer_mode=ragym_{mode}_async",
        f"trainer.v1.{mode}_async.num_warmup_batches=0",
        *ASYNC,
    )
    metrics, log, out = lora_run(toy, f"{mode}_async", overrides, monkeypatch)
    assert all(m["training/off_policy/trajectory_staleness_worst/max"] == 0 for m in metrics.values()), (
        metrics
    )
    # Adapters reached the rollout at every sync: colocate_async's base weights, then adapters; separate_async's
    # base weights and adapters at once, then adapters.
    kinds = [kind for _, kind in SYNC_LINE.findall(log)]
    assert kinds.count("adapters") >= STEPS and "full weights" not in kinds, kinds
    recorded = [json.loads(line) for line in (out / "traces" / "episodes.jsonl").read_text().splitlines()]
    # Every traced episode names the adapters' version that generated it, each turn too: the trainer's, each step
    # (the faulty rollout tags its outputs with the version it took, not the adapters it kept).
    assert {(r["step"], *r["weight_versions"]) for r in recorded} == {
        (step, step - 1, step - 1) for step in range(1, STEPS + 1)
    }
    assert all(r["turn_weight_versions"] == [r["weight_versions"]] * len(r["turns"]) for r in recorded)
    assert all(m["off_policy/resumed_turn_share"] == 0 for m in metrics.values())
    # KB-VQA's images reach the batch as image tokens in either async mode.
    assert all(m["images/tokens_per_episode"] > 0 for m in metrics.values()), metrics
