"""LoRA under verl's own trainer on CPU: ``ragym train --engine verl --toy`` with ``lora_rank`` set, the hf rollout
taking verl's base-then-adapters weight sync. Two GRPO steps train only the language model's adapters, the
rollout's log-probs agree with the trainer's as after a full sync, each sync's bytes are logged, and the
checkpoint exports as an adapter folder and as a merged model that evaluate alike."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from ragym.rl.lora import plain_weight_name
from ragym.rl.models import load_policy
from ragym.rl.verl_plugin.verl_local import console_step_metrics
from tests.launch.conftest import RayHead
from tests.launch.test_verl_trainer import PROBS_DIFF_BOUND, ragym

pytestmark = pytest.mark.ray

RECIPE = "kbvqa_qwen2_5_vl_7b"
LORA = (
    "actor_rollout_ref.model.lora_rank=8",
    "actor_rollout_ref.model.lora_alpha=16",
    # Moves the adapters (B starts at 0) enough in one step that a rollout serving stale ones would show.
    "actor_rollout_ref.actor.optim.lr=1e-3",
)
SYNC_LINE = re.compile(
    r"step (\d+) weight sync: \d+ tensors, ([\d.]+) MB \((adapters|base weights|full weights)\)"
)


def test_two_lora_steps_sync_adapters_and_export(toy: Path, ray_head: RayHead) -> None:
    out = toy / "lora"
    log = ragym(
        "train",
        "--engine",
        "verl",
        "--recipe",
        RECIPE,
        "--toy",
        str(toy),
        "--network",
        "host",
        f"trainer.default_local_dir={out}",
        *LORA,
        cwd=toy,
        head=ray_head,
    )
    metrics = console_step_metrics(log)
    assert sorted(metrics) == [1, 2], f"steps seen: {sorted(metrics)}"
    assert any(m["actor/grad_norm"] > 0 for m in metrics.values()), metrics
    assert all(m["training/off_policy/trajectory_staleness/max"] == 0 for m in metrics.values())
    # The rollout served the adapters of the step before: its log-probs are the trainer's, as after a full sync.
    assert all(m["training/rollout_probs_diff_mean"] < PROBS_DIFF_BOUND for m in metrics.values()), metrics

    # verl's LoRA sync: the base weights once (the rollout starts from dummy weights), then the adapters alone
    # before step 1 and after each step's update, each a small share of the bytes.
    syncs = [(kind, int(step), float(mb)) for step, mb, kind in SYNC_LINE.findall(log)]
    assert [(kind, step) for kind, step, _ in syncs] == [
        ("base weights", 0),
        ("adapters", 0),
        ("adapters", 1),
        ("adapters", 2),
    ], syncs
    assert all(mb < syncs[0][2] / 10 for kind, _, mb in syncs if kind == "adapters"), syncs

    # Only the language model's adapters changed: every base weight in the checkpoint is the toy policy's.
    policy = toy / "policy" / "KBVQA-v0"
    saved = torch.load(out / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt", weights_only=False)
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
