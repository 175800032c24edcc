"""The run checks (``ragym.rl.guards.RUN_CHECKS``), on by default: silent on the metrics of healthy runs, each
firing on its planted fault in one line, recorded in ``guards.jsonl``; ``warn`` logs without stopping."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from ragym.rl.core.metrics import image_metrics
from ragym.rl.guards import (
    DEFAULTS,
    RUN_CHECKS,
    GuardMonitor,
    adapter_digest,
    adapter_sync_metrics,
    read_firings,
    read_guards,
)

RUNS = Path(__file__).parent / "fixtures" / "run_check_metrics.jsonl"
"""Per-step metrics the run checks read, from real runs (``run``: what ran; ``healthy``: whether it is a healthy
run or one with a planted or real fault): the CPU demo's KB-VQA runs, the answer task's runs, and the calibration
runs of issue #47 (docs/training.md, "Run checks")."""


def runs() -> dict[str, tuple[bool, list[dict[str, float]]]]:
    out: dict[str, tuple[bool, list[dict[str, float]]]] = {}
    for line in RUNS.read_text().splitlines():
        record = json.loads(line)
        run, healthy = record.pop("run"), record.pop("healthy")
        out.setdefault(run, (healthy, []))[1].append(record)
    return out


def check(stream: list[dict[str, float]], guards: dict | None = None, out: Path | None = None) -> list:
    monitor = GuardMonitor(read_guards(guards), out)
    return [f for record in stream for f in monitor.update(int(record["step"]), record)]


@pytest.mark.parametrize("run", sorted(name for name, (healthy, _) in runs().items() if healthy))
def test_no_run_check_fires_on_a_healthy_run(run):
    assert check(runs()[run][1]) == []


def test_every_group_flat_for_ten_steps_stops_the_run(tmp_path):
    """The answer task's seed 4 (issue #46): a warm start that never answered, every reward 0 for 30 steps."""
    healthy, stream = runs()["local answer seed 4 (broken warm start)"]
    assert not healthy
    (firing,) = check(stream, out=tmp_path)
    assert (firing.guard, firing.step, firing.action) == ("flat_groups", 10, "stop")
    (recorded,) = read_firings(tmp_path)
    assert recorded["message"] == firing.line() and "\n" not in firing.line()
    assert "grpo/zero_adv_group_share >= 1.0 for 10 steps" in firing.line()


def test_a_firing_line_a_killed_run_cut_short_is_left_out_and_the_rest_read(tmp_path, caplog):
    _, stream = runs()["local answer seed 4 (broken warm start)"]
    check(stream, out=tmp_path)
    path = tmp_path / "guards.jsonl"
    whole = path.read_text()
    path.write_text(whole + whole[: len(whole) // 2])  # a second firing's line, cut by the kill
    assert [f["guard"] for f in read_firings(tmp_path)] == ["flat_groups"]
    assert "cut short" in caplog.text and "guards.jsonl" in caplog.text


def test_a_rollout_that_never_gets_the_trained_weights_stops_the_run():
    """The verl#7495 signature, planted on the local engine: async rollouts whose sync copies nothing, so the
    rollout samples from the initial policy while the trainer moves on (/tmp/cal/stuck.py in the calibration)."""
    healthy, stream = runs()["local kbvqa async, sync skipped (planted)"]
    assert not healthy
    firings = check(stream)
    assert [f.guard for f in firings] == ["rollout_mismatch"], firings
    assert firings[0].step <= len(stream)


def test_warn_instead_of_stop_logs_and_records_without_stopping(tmp_path, caplog):
    _, stream = runs()["local answer seed 4 (broken warm start)"]
    monitor = GuardMonitor(read_guards({"flat_groups": {"action": "warn"}}), tmp_path)
    stops = [monitor.check(int(r["step"]), dict(r)) for r in stream]
    assert stops == [None] * len(stream)
    assert [f["action"] for f in read_firings(tmp_path)] == ["warn"]
    assert "guard flat_groups fired at step 10" in caplog.text


@pytest.mark.parametrize(
    ("images", "token_ids", "fires"),
    [
        ([2, 1], [[5, 9, 9, 9, 9, 6], [5, 9, 9, 6]], False),  # each image expanded to placeholder tokens
        ([2, 1], [[5, 6], [5, 6]], True),  # images carried, their placeholders gone: the model saw none
        ([0, 0], [[5, 6], [5, 6]], False),  # a text-only env
        ([1, 0], [[5, 9, 6], [5, 6]], False),  # some episodes without images
    ],
)
def test_images_that_never_reach_the_model_stop_the_run(images, token_ids, fires):
    metrics = {"step": 1, **image_metrics(images, token_ids, pad_id=9)}
    assert [f.guard for f in check([metrics])] == (["images_dropped"] if fires else [])


def _adapters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p for name, p in model.named_parameters() if "lora_" in name}


@pytest.mark.parametrize("delivered", [True, False])
def test_a_sync_that_skips_the_adapters_stops_the_run(delivered, tmp_path):
    """A LoRA policy and its rollout copy; a training step moves the adapters; the sync either copies every trained
    weight (the adapters) or, the planted fault, only the base weights (which LoRA does not train)."""
    from peft import LoraConfig, get_peft_model

    from tests.rl.engine_helpers import build_model

    trainer = get_peft_model(
        build_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    rollout = copy.deepcopy(trainer)
    synced = adapter_digest(_adapters(trainer))  # the trainer's adapters at the previous sync
    with torch.no_grad():
        for p in _adapters(trainer).values():
            p.add_(0.01)  # an update
    before = adapter_digest(_adapters(rollout))
    targets = dict(rollout.named_parameters())
    with torch.no_grad():
        for name, p in trainer.named_parameters():
            if delivered == ("lora_" in name):
                targets[name].copy_(p)
    metrics = adapter_sync_metrics(
        (synced, adapter_digest(_adapters(trainer))), (before, adapter_digest(_adapters(rollout)))
    )
    monitor = GuardMonitor(read_guards(None), tmp_path)
    stop = monitor.check(3, {"actor/entropy": 0.5, **metrics})
    assert (stop is None) == delivered
    if not delivered:
        assert stop.guard == "adapter_sync" and "never received" in stop.line()


def test_a_step_without_a_sync_is_not_judged():
    assert (
        check(
            [{"step": 1, "actor/entropy": 0.5}, {"step": 2, **adapter_sync_metrics(("a", "a"), ("b", "b"))}]
        )
        == []
    )


def test_every_run_check_is_on_and_stops_by_default():
    assert set(RUN_CHECKS) <= set(DEFAULTS)
    assert {name: DEFAULTS[name].action for name in RUN_CHECKS} == dict.fromkeys(RUN_CHECKS, "stop")


@pytest.mark.parametrize("delivered", [True, False])
def test_the_local_engines_async_sync_is_checked(delivered):
    """The local engine's rollout-ahead sync under LoRA reports each sync's ``lora/sync_*`` at the step that trains
    on its episodes; the planted fault is a sync whose list of weights to copy lost the adapters."""
    import asyncio

    from peft import LoraConfig, get_peft_model

    from ragym.rl.engine.async_rollouts import RolloutAhead
    from tests.rl.engine_helpers import build_model

    trainer = get_peft_model(
        build_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    loop = asyncio.new_event_loop()
    ahead = RolloutAhead(trainer, 0, 2, loop)
    try:
        if not delivered:
            ahead._pairs = []  # the sync that skips the adapters
        with torch.no_grad():
            for p in _adapters(trainer).values():
                p.add_(0.01)
        ahead.sync(1)
        stop = GuardMonitor(read_guards(None)).check(2, {"actor/entropy": 0.5, **ahead.sync_metrics})
        assert (stop is None) == delivered, ahead.sync_metrics
    finally:
        ahead.close()
        loop.close()
