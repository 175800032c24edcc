"""LoRA under verl's own trainer on CPU, one run per trainer mode, each carrying its planted fault: ``ragym train
--engine verl --toy`` with ``lora_rank`` set, the hf rollout taking verl's base-then-adapters weight sync. Two GRPO
steps on delivered adapters agree with the trainer (``rollout_probs_diff_mean`` within the full-weight runs' bound);
from weight version ``FAULT_FROM`` on the rollout takes every sync but loads no adapters (``tests/launch/lora_fault.py``,
volcengine/verl#7495's signature), and the next step's log-probs part from the trainer's while the ``adapter_sync``
run check names the sync that delivered nothing. This file: the sync mode (``trainer.v1.trainer_mode: ragym``), its
sync lines, that only the language model's adapters trained, and adapter and merged exports that evaluate alike;
``test_verl_lora_async.py``: the async modes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from ragym.rl.guards import ADAPTERS_ROLLOUT_CHANGED, ADAPTERS_TRAINED_CHANGED, read_firings
from ragym.rl.lora import plain_weight_name
from ragym.rl.models import load_policy
from tests.launch.test_verl_trainer import PROBS_DIFF_BOUND, logged_steps, metrics_lines, ragym

pytestmark = pytest.mark.ray

RECIPE = "kbvqa_qwen2_5_vl_7b"
LORA = (
    "actor_rollout_ref.model.lora_rank=8",
    "actor_rollout_ref.model.lora_alpha=32",
    # Large enough that a rollout serving adapters one update old shows: the async modes measured
    # rollout_probs_diff_mean 0.059 with the initial adapters at step 2, the delivered adapters 0.002-0.003.
    "actor_rollout_ref.actor.optim.lr=1e-2",
    # The run goes on after the adapter_sync check fires, so that the next step shows the log-probs parting.
    "+ragym.guards.adapter_sync.action=warn",
)
STEPS = 3
FAULT_FROM = 2
"""The first weight version whose adapters the faulty rollout skips: steps 1-2 sample from delivered adapters, the
sync after step 2's update delivers nothing, step 3 samples from version 1's adapters."""
FAULT = "tests.launch.lora_fault"
"""The planted fault, loaded into every process of the run (``VERL_USE_EXTERNAL_MODULES``)."""
FAULT_FROM_VAR = "RAGYM_LORA_FAULT_FROM"
"""The variable through which the planted fault reads ``FAULT_FROM`` (never imported here: importing it plants it)."""
SYNC_LINE = re.compile(
    r"step (\d+) weight sync: \d+ tensors, ([\d.]+) MB \((adapters|base weights|full weights|base weights \+ adapters)\)"
)


def lora_run(
    toy: Path,
    name: str,
    overrides: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    rollout: str | None = None,
    fault_module: str | None = FAULT,
) -> tuple[dict[int, dict[str, float]], str, Path]:
    """A LoRA run of ``STEPS`` steps on ``rollout`` (None: the hf replica, CPU's default) with the fault planted from
    ``FAULT_FROM``: its metrics per step, log and folder. It starts a Ray of its own (``--network private``): its
    workers must inherit the fault's variables (``fault_module`` through ``VERL_USE_EXTERNAL_MODULES``), which a
    running Ray's do not. A fault that is not a module verl loads comes in ``overrides`` (vLLM's: a worker
    extension)."""
    out = toy / "lora" / name
    if fault_module:
        monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", fault_module)
    monkeypatch.setenv(FAULT_FROM_VAR, str(FAULT_FROM))
    # Ray's workers import the fault from this checkout
    repo = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    before = metrics_lines(out)
    log = ragym(
        "train",
        "--engine",
        "verl",
        "--recipe",
        RECIPE,
        "--toy",
        str(toy),
        "--network",
        "private",
        *(["--rollout", rollout] if rollout else []),
        f"trainer.total_training_steps={STEPS}",
        f"trainer.default_local_dir={out}",
        *LORA,
        *overrides,
        cwd=toy,
    )
    metrics = logged_steps(out, before, log)
    assert sorted(metrics) == list(range(1, STEPS + 1)), f"steps seen: {sorted(metrics)}"
    assert any(m["actor/grad_norm"] > 0 for m in metrics.values()), metrics
    check_fault_seen(name, metrics, log, out)
    return metrics, log, out


def check_fault_seen(name: str, metrics: dict[int, dict[str, float]], log: str, out: Path) -> None:
    """Both checks see the planted fault, and only from ``FAULT_FROM`` on: the log-prob agreement at the step after
    it, the ``adapter_sync`` run check at the step whose sync delivered nothing."""
    diffs = {step: round(m["training/rollout_probs_diff_mean"], 4) for step, m in metrics.items()}
    synced = {step: (m[ADAPTERS_TRAINED_CHANGED], m[ADAPTERS_ROLLOUT_CHANGED]) for step, m in metrics.items()}
    print(
        f"{name} LoRA, fault from version {FAULT_FROM}: rollout_probs_diff_mean {diffs}, adapter syncs {synced}"
    )
    assert "planted fault" in log
    # Steps 1..FAULT_FROM sampled from the adapters the trainer held; step FAULT_FROM + 1 from older ones.
    assert all(diffs[step] <= PROBS_DIFF_BOUND for step in range(1, FAULT_FROM + 1)), diffs
    assert diffs[FAULT_FROM + 1] > PROBS_DIFF_BOUND, diffs
    # Each step reports the sync after its update: delivered before FAULT_FROM (the rollout's adapters moved with
    # the trainer's), not from it on.
    assert all(synced[step] == (1.0, 1.0) for step in range(1, FAULT_FROM)), synced
    assert all(synced[step] == (1.0, 0.0) for step in range(FAULT_FROM, STEPS + 1)), synced
    firings = [f for f in read_firings(out) if f["guard"] == "adapter_sync"]
    assert [f["step"] for f in firings] == [FAULT_FROM], firings
    assert f"guard adapter_sync fired at step {FAULT_FROM}: the trainer's adapters changed" in log
    assert metrics[FAULT_FROM]["guard/adapter_sync"] == 1.0
    assert all(metrics[step]["guard/adapter_sync"] == 0.0 for step in range(1, FAULT_FROM)), metrics


def test_lora_in_sync_mode_syncs_adapters_exports_and_its_checks_see_the_fault(
    toy: Path, monkeypatch
) -> None:
    metrics, log, out = lora_run(toy, "sync", (), monkeypatch)
    assert all(m["training/off_policy/trajectory_staleness/max"] == 0 for m in metrics.values())

    # verl's LoRA sync: the base weights once (the rollout starts from dummy weights), then the adapters alone
    # before step 1 and after each step's update, each a small share of the bytes (the faulty rollout takes
    # them all).
    syncs = [(kind, int(step), float(mb)) for step, mb, kind in SYNC_LINE.findall(log)]
    adapter_syncs = [("adapters", step) for step in range(STEPS + 1)]
    assert [(kind, step) for kind, step, _ in syncs] == [("base weights", 0), *adapter_syncs], syncs
    assert all(mb < syncs[0][2] / 10 for kind, _, mb in syncs if kind == "adapters"), syncs

    # Only the language model's adapters changed: every base weight in the checkpoint is the toy policy's.
    policy = toy / "policy" / "KBVQA-v0"
    saved = torch.load(
        out / f"global_step_{STEPS}" / "actor" / "model_world_size_1_rank_0.pt", weights_only=False
    )
    saved = {plain_weight_name(k): v.to_local() if hasattr(v, "to_local") else v for k, v in saved.items()}
    before = load_policy(policy)[0].state_dict()
    base = {k: v for k, v in saved.items() if ".lora_" not in k}
    assert base.keys() == before.keys()
    assert [k for k in base if not torch.equal(base[k], before[k])] == []
    adapters = [k for k in saved if ".lora_B." in k]
    assert adapters and all(".language_model." in k for k in adapters)
    assert any(saved[k].abs().sum() > 0 for k in adapters)

    adapter, merged = toy / "lora_export" / "adapter", toy / "lora_export" / "merged"
    ragym("export", str(out), "--out", str(adapter), cwd=toy)
    ragym("export", str(out), "--out", str(merged), "--merge", cwd=toy)
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(policy)
    results = {}
    for name, folder in (("adapter", adapter), ("merged", merged)):
        ragym(
            "eval",
            "--model",
            str(folder),
            "--data",
            str(toy / "KBVQA-v0" / "data" / "test.parquet"),
            "--out",
            str(toy / "lora_eval" / name),
            "--limit",
            "4",
            cwd=toy,
        )
        results[name] = (toy / "lora_eval" / name / "rollouts.jsonl").read_text()
    # The same four episodes, turn by turn.
    assert results["adapter"].count("\n") == 4 and results["adapter"] == results["merged"]
