"""LoRA in the local engine: verl's recipe keys switch it on, only the language model's adapters train, the
rollout generates with the updated adapters, a LoRA checkpoint resumes, and its export (the adapter folder, or
the merged model) evaluates as the trained policy does."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

from ragym.rl.core.grpo import response_log_probs
from ragym.rl.errors import UsageError
from ragym.rl.eval.args import EvalConfig
from ragym.rl.eval.backends import Backend, hf_backend
from ragym.rl.eval.evaluate import run_eval
from ragym.rl.export import export_checkpoint
from ragym.rl.lora import ADAPTER_CONFIG, VISION_TOWER
from ragym.rl.train import build_trainer
from tests.rl.engine.test_engine_trainer import _overrides

LORA = [
    "actor_rollout_ref.model.lora_rank=4",
    "actor_rollout_ref.model.lora_alpha=8",
    # Large enough that one step moves the step-2 rollout's log-probs measurably.
    "actor_rollout_ref.actor.optim.lr=0.02",
]


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """The demo KB's rows and a tiny Qwen2.5-VL policy (built once for the module)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.policy import build_tiny_policy

    root = tmp_path_factory.mktemp("lora")
    kb = build_kb(root / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    return kb, build_tiny_policy("qwen2_5_vl", root / "policy", seed=0)


def overrides(tiny_setup, out: Path, steps: int, extra: list[str] = LORA) -> list[str]:
    """The local engine tests' run, 4 samples a group, with ``extra`` (LoRA's keys by default)."""
    return [*_overrides(tiny_setup, out, steps), "actor_rollout_ref.rollout.n=4", *extra]  # the later n wins


@pytest.fixture(scope="module")
def lora_run(tiny_setup, tmp_path_factory):
    """Two GRPO steps with LoRA: the trainer, the base weights before, the adapters after step 1, and the
    episodes each step rolled out."""
    out = tmp_path_factory.mktemp("lora_run")
    trainer = build_trainer("kbvqa_tiny_cpu", overrides(tiny_setup, out, steps=2))
    base = {k: v.detach().clone() for k, v in trainer.model.state_dict().items() if "lora_" not in k}
    sampled, adapters = [], []
    sample_batch = trainer._sample_batch

    def recording():
        batch, times = sample_batch()
        sampled.append(batch)
        return batch, times

    trainer._sample_batch = recording
    trainer.fit(max_steps=1)
    adapters.append({k: v.detach().clone() for k, v in get_peft_model_state_dict(trainer.peft).items()})
    trainer.fit()
    yield trainer, base, adapters[0], sampled, out
    trainer.close()


def test_only_language_model_adapters_are_trained(lora_run):
    trainer, base, _, _, _ = lora_run
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    optimized = [names[id(p)] for group in trainer.optimizer.param_groups for p in group["params"]]
    assert optimized and all(".lora_A." in n or ".lora_B." in n for n in optimized)
    assert all(".language_model." in n for n in optimized)  # the vision tower has none
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable == set(optimized)
    state = trainer.model.state_dict()
    changed = [k for k in base if not torch.equal(base[k], state[k])]
    assert changed == []  # every base weight, the vision tower's included, bit-identical after 2 steps
    # B starts at 0: the adapters moved.
    assert any(state[k].abs().sum() > 0 for k in state if ".lora_B." in k)


def test_step_two_generated_with_the_updated_adapters(lora_run):
    trainer, _, after_step_1, sampled, _ = lora_run
    episodes = [e for group in sampled[1].groups for e in group]
    samples = [e.sample() for e in episodes]
    length = max(len(s.response_ids) for s in samples)
    temperature = trainer.cfg.update.temperature
    now = {k: v.clone() for k, v in get_peft_model_state_dict(trainer.peft).items()}  # it aliases the weights
    set_peft_model_state_dict(trainer.peft, after_step_1)
    with torch.no_grad():
        updated = response_log_probs(trainer.model, trainer.image_inputs, samples, length, temperature)[0]
        with trainer.peft.disable_adapter():  # the base policy: what a rollout without the adapters gives
            base = response_log_probs(trainer.model, trainer.image_inputs, samples, length, temperature)[0]
    set_peft_model_state_dict(trainer.peft, now)
    gaps_updated, gaps_base = [], []
    for i, episode in enumerate(episodes):
        mask = torch.tensor(episode.output.response_mask, dtype=torch.bool)
        rollout = torch.tensor(episode.output.response_logprobs)[mask]
        gaps_updated.append((rollout - updated[i, : len(mask)][mask]).abs().max())
        gaps_base.append((rollout - base[i, : len(mask)][mask]).abs().max())
    assert max(gaps_updated) < 1e-4  # the rollout ran the adapters of step 1
    assert max(gaps_base) > 1e-2  # and they differ from the base policy's


def test_lora_checkpoint_is_an_adapter_and_resumes(lora_run, tiny_setup):
    trainer, _, _, _, out = lora_run
    ckpt = out / "global_step_2"
    assert (ckpt / "adapter_config.json").is_file() and (ckpt / "adapter_model.safetensors").is_file()
    assert not (ckpt / "model.safetensors").exists()
    policy_bytes = (Path(tiny_setup[1]) / "model.safetensors").stat().st_size
    assert (ckpt / "adapter_model.safetensors").stat().st_size < policy_bytes / 5
    adapters = {k: v.clone() for k, v in get_peft_model_state_dict(trainer.peft).items()}
    optim = trainer.optimizer.state_dict()["state"]
    resumed = build_trainer("kbvqa_tiny_cpu", overrides(tiny_setup, out, steps=3))
    try:
        assert resumed.step == 2
        loaded = get_peft_model_state_dict(resumed.peft)
        assert loaded.keys() == adapters.keys() and all(torch.equal(adapters[k], loaded[k]) for k in adapters)
        state = resumed.optimizer.state_dict()["state"]
        assert len(state) == len(optim) == len(adapters)
        assert all(torch.equal(optim[i]["exp_avg_sq"], state[i]["exp_avg_sq"]) for i in optim)
        base = {k: v.clone() for k, v in resumed.model.state_dict().items() if "lora_" not in k}
        resumed.fit()
        assert resumed.step == 3 and (out / "global_step_3" / "adapter_config.json").is_file()
        after = resumed.model.state_dict()
        assert all(torch.equal(base[k], after[k]) for k in base)
    finally:
        resumed.close()


def test_lora_settings_cannot_change_on_resume(lora_run, tiny_setup):
    _, _, _, _, out = lora_run
    changed = [*LORA, "actor_rollout_ref.model.lora_rank=8"]
    with pytest.raises(UsageError, match="lora_rank=4, this run sets 8"):
        build_trainer("kbvqa_tiny_cpu", overrides(tiny_setup, out, steps=9, extra=changed))


def test_lora_keys_are_read_not_listed_as_cluster_only(tiny_setup, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ragym.rl.train"):
        trainer = build_trainer("kbvqa_tiny_cpu", overrides(tiny_setup, tmp_path, steps=1))
    trainer.close()
    assert not [r for r in caplog.records if "lora" in r.getMessage()]
    assert trainer.cfg.lora.exclude_modules == VISION_TOWER


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["actor_rollout_ref.model.lora_rank=-2"], "lora_rank=-2"),
        (["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=0"], "lora_alpha=0"),
        (
            ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.target_modules=[no_such_proj]"],
            "target_modules",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_adapter_path=/nonexistent"],
            "not a peft adapter folder",
        ),
    ],
)
def test_bad_lora_settings_are_refused_naming_the_key(tiny_setup, tmp_path, extra, message):
    with pytest.raises(UsageError, match=message):
        build_trainer("kbvqa_tiny_cpu", overrides(tiny_setup, tmp_path, steps=1, extra=extra)).close()


def test_export_adapter_and_merged_evaluate_as_the_trained_policy(lora_run, tiny_setup, tmp_path):
    trainer, _, _, _, out = lora_run
    adapter = export_checkpoint(out / "global_step_2", tmp_path / "adapter")
    merged = export_checkpoint(out / "global_step_2", tmp_path / "merged", merge=True)
    config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    assert Path(config["base_model_name_or_path"]) == Path(tiny_setup[1]).resolve()
    assert not (adapter / "model.safetensors").exists() and (merged / "model.safetensors").is_file()
    for folder in (adapter, merged):  # the recipe snapshot, as for full checkpoints
        recorded = json.loads((folder / "ragym_export.json").read_text())
        assert recorded["step"] == 2 and recorded["recipe"]["actor_rollout_ref"]["model"]["lora_rank"] == 4
    rows = trainer.val_rows
    cfg = EvalConfig(batch_size=len(rows))
    length = trainer.cfg.response_length
    trained = Backend(trainer.server, trainer.tokenizer, trainer.processor, "trained")
    records = {
        name: run_eval(rows, backend, trainer.config, cfg)
        for name, backend in (
            ("trained", trained),
            ("adapter", hf_backend(adapter, length, cfg.batch_wait_s, cfg.seed)),
            ("merged", hf_backend(merged, length, cfg.batch_wait_s, cfg.seed)),
            ("base", hf_backend(tiny_setup[1], length, cfg.batch_wait_s, cfg.seed)),
        )
    }
    episodes = {name: [(r.correct, r.episode) for r in recs] for name, recs in records.items()}
    assert len(episodes["trained"]) == len(rows)
    assert episodes["adapter"] == episodes["trained"]
    assert episodes["merged"] == episodes["trained"]
    assert episodes["base"] != episodes["trained"]  # what the adapters changed shows in these episodes


def test_eval_and_view_take_an_adapter_folder_and_a_lora_run(lora_run, tiny_setup, tmp_path):
    from ragym.rl.eval.evaluate import main
    from ragym.rl.view.data import load

    _, _, _, _, out = lora_run
    adapter = export_checkpoint(out / "global_step_2", tmp_path / "adapter")
    kb = tiny_setup[0]
    argv = [
        "--model",
        str(adapter),
        "--data",
        f"{kb}/data/test.parquet",
        "--out",
        str(tmp_path / "eval"),
        "--limit",
        "2",
        "--backend",
        "hf",
    ]
    assert main(argv) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["complete"] and metrics["num_rows"] == 2
    assert len(load(tmp_path / "eval").episodes) == 2  # ragym view of the adapter's evaluation
    steps = {e["step"] for e in load(out).episodes if e["phase"] == "train"}  # and of the LoRA run's traces
    assert {1, 2} <= steps


def test_merge_of_full_weights_is_refused(tiny_setup, tmp_path):
    trainer = build_trainer("kbvqa_tiny_cpu", overrides(tiny_setup, tmp_path / "run", steps=1, extra=[]))
    trainer.save()
    trainer.close()
    with pytest.raises(UsageError, match="drop --merge"):
        export_checkpoint(tmp_path / "run", tmp_path / "out", merge=True)
