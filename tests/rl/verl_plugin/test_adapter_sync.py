"""The ``adapter_sync`` run check fed by the hf rollout's own weight syncs: a sync that delivers the trainer's new
adapters records (trained changed, rollout changed) = (1, 1); one whose load skips the adapters (volcengine/verl#7495)
records (1, 0), and the check stops the run with its one line."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch
from omegaconf import OmegaConf
from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

from ragym.rl import lora
from ragym.rl.guards import (
    ADAPTERS_ROLLOUT_CHANGED,
    ADAPTERS_TRAINED_CHANGED,
    DEFAULTS,
    GuardMonitor,
    read_firings,
)
from ragym.rl.verl_plugin.adapter_sync import AdapterSyncLog, step_metrics
from ragym.rl.verl_plugin.rollout import HFGenerationServer
from tests.rl.verl_plugin.test_lora_sync import trained  # noqa: F401  (the fixture)
from tests.rl.verl_plugin.test_plugin import rollout_config


def move_adapters(model: torch.nn.Module, seed: int) -> None:
    """One 'update' of the trainer: every lora_B moves."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.1)


def sync_adapters(server: HFGenerationServer, peft, config, step: int) -> None:
    adapters = collect_lora_params(module=peft, layered_summon=False, base_sync_done=True)
    server.update_weights(adapters, step, config.to_dict(), base_sync_done=True)


def pairs(records: list[dict]) -> list[tuple[float, float, float]]:
    return [(r["step"], r[ADAPTERS_TRAINED_CHANGED], r[ADAPTERS_ROLLOUT_CHANGED]) for r in records]


def test_syncs_record_whether_the_trainers_and_the_rollouts_adapters_changed(trained, monkeypatch, tmp_path):  # noqa: F811
    path, model, peft, config = trained
    server = HFGenerationServer(str(path), rollout_config(seed=0), lora_adapters=True)
    base = collect_lora_params(module=peft, layered_summon=False, base_sync_done=False)
    server.update_weights(
        {replace_lora_wrapper(k, config): v for k, v in base.items()}, 0, config.to_dict(), False
    )
    sync_adapters(server, peft, config, 0)
    # The first adapter sync has no earlier one to compare with: not judged.
    assert server.take_adapter_syncs() == []
    move_adapters(model, 1)
    sync_adapters(server, peft, config, 1)
    sync_adapters(server, peft, config, 2)  # no update in between: the trainer's adapters did not change
    assert pairs(server.take_adapter_syncs()) == [(1, 1.0, 1.0), (2, 0.0, 0.0)]
    assert server.take_adapter_syncs() == []  # taken once

    # The planted fault of tests/launch/lora_fault.py: the load skips the adapters, every delivery check passes.
    load_synced = lora.load_synced
    monkeypatch.setattr(
        lora,
        "load_synced",
        lambda own, incoming: load_synced(own, {k: v for k, v in incoming.items() if ".lora_" not in k}),
    )
    move_adapters(model, 2)
    sync_adapters(server, peft, config, 3)
    records = server.take_adapter_syncs()
    assert pairs(records) == [(3, 1.0, 0.0)]

    monitor = GuardMonitor({"adapter_sync": DEFAULTS["adapter_sync"]}, tmp_path)
    metrics = {"actor/entropy": 0.5, **step_metrics(records)}
    stop = monitor.check(3, metrics)
    assert stop is not None and metrics["guard/adapter_sync"] == 1.0
    assert stop.line() == read_firings(tmp_path)[0]["message"]
    assert stop.line().startswith(
        "guard adapter_sync fired at step 3: the trainer's adapters changed since the last sync"
    )
    # A healthy step's records do not fire it.
    assert (
        monitor.check(
            4,
            {
                "actor/entropy": 0.5,
                **step_metrics([{ADAPTERS_TRAINED_CHANGED: 1.0, ADAPTERS_ROLLOUT_CHANGED: 1.0}]),
            },
        )
        is None
    )


def test_the_trainer_logs_its_replicas_worst_sync_under_unmerged_lora_only(monkeypatch, tmp_path):
    from ragym.rl.verl_plugin import adapter_sync, rollout
    from ragym.rl.verl_plugin import trainer as verl_trainer
    from ragym.rl.verl_plugin.trainer import RagymTrainer

    monkeypatch.delenv(adapter_sync.RECORDS_VAR, raising=False)  # the run sets it for its rollout servers
    delivered = {ADAPTERS_TRAINED_CHANGED: 1.0, ADAPTERS_ROLLOUT_CHANGED: 1.0}
    skipped = {ADAPTERS_TRAINED_CHANGED: 1.0, ADAPTERS_ROLLOUT_CHANGED: 0.0}
    monkeypatch.setattr(rollout, "take_adapter_syncs", lambda: [delivered, skipped, delivered])
    for model, expected in (
        ({"lora_rank": 8, "lora": {"merge": False}}, skipped),
        ({"lora_rank": 8, "lora": {"merge": True}}, {}),  # merged full weights: no adapters travel
        ({"lora_rank": 0}, {}),
    ):
        config = OmegaConf.create(
            {"actor_rollout_ref": {"model": model}, "trainer": {"default_local_dir": str(tmp_path)}}
        )
        trainer = SimpleNamespace(
            config=config, _ragym_sync_records=verl_trainer._adapter_sync_records(config)
        )
        assert RagymTrainer._adapter_sync_metrics(trainer) == expected, model


def test_the_trainer_takes_the_vllm_workers_records_from_the_runs_folder(monkeypatch, tmp_path):
    """The CPU vLLM workers' records, left as files in the folder the trainer named for the run's rollout servers
    (``RECORDS_VAR``), join the hf servers' in the step's metrics, each taken once."""
    from ragym.rl.verl_plugin import adapter_sync, rollout
    from ragym.rl.verl_plugin import trainer as verl_trainer
    from ragym.rl.verl_plugin.trainer import RagymTrainer

    monkeypatch.delenv(adapter_sync.RECORDS_VAR, raising=False)
    monkeypatch.setattr(rollout, "take_adapter_syncs", list)  # no hf server runs
    model = {"lora_rank": 8, "lora": {"merge": False}}
    config = OmegaConf.create(
        {"actor_rollout_ref": {"model": model}, "trainer": {"default_local_dir": str(tmp_path)}}
    )
    folder = verl_trainer._adapter_sync_records(config)
    assert folder is not None and os.environ[adapter_sync.RECORDS_VAR] == str(folder)
    trainer = SimpleNamespace(config=config, _ragym_sync_records=folder)
    log = AdapterSyncLog()  # a vLLM worker's: the first sync is not judged, the second delivered nothing
    log.record(0, "v0", ("", "a"))
    log.record(1, "v1", ("a", "a"))
    adapter_sync.leave_records(log.take(), Path(os.environ[adapter_sync.RECORDS_VAR]))
    skipped = {ADAPTERS_TRAINED_CHANGED: 1.0, ADAPTERS_ROLLOUT_CHANGED: 0.0}
    assert RagymTrainer._adapter_sync_metrics(trainer) == skipped
    assert RagymTrainer._adapter_sync_metrics(trainer) == {}  # taken once
    # Without unmerged LoRA the run names no folder, and its rollout servers get none.
    monkeypatch.delenv(adapter_sync.RECORDS_VAR)
    merged = OmegaConf.create({"actor_rollout_ref": {"model": {"lora_rank": 8, "lora": {"merge": True}}}})
    assert verl_trainer._adapter_sync_records(merged) is None and adapter_sync.RECORDS_VAR not in os.environ
