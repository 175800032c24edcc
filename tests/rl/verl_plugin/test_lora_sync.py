"""The hf rollout takes verl's FSDP LoRA weight sync: the base weights once (with peft's ``base_layer`` names), then
the adapters alone; what it then computes is the trainer's LoRA policy. The tensors are made by verl's own
``collect_lora_params`` / ``replace_lora_wrapper``, as its FSDP engine makes them."""

from __future__ import annotations

import pytest
import torch
from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

from ragym.rl.lora import PEFT_CONFIG_KEY, VISION_TOWER, LoraSettings, add_adapters
from ragym.rl.models import load_policy
from ragym.rl.verl_plugin.rollout import HFGenerationServer
from ragym.rl.verl_plugin.weight_sync import lora_sync
from tests.rl.verl_plugin.test_plugin import rollout_config

SETTINGS = LoraSettings(
    rank=4, alpha=8, target_modules="all-linear", exclude_modules=VISION_TOWER, adapter_path=None
)


@pytest.fixture
def trained(tiny_policy_dir):
    """A trainer-side LoRA policy whose adapters moved (B is no longer 0), and its peft config as verl sends it."""
    path = tiny_policy_dir("qwen2_5_vl")
    model = load_policy(path)[0]
    peft = add_adapters(model, SETTINGS, path)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return path, model, peft, peft.peft_config["default"]


def logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.arange(5, 40)[None]
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def test_base_then_adapters_give_the_trainers_policy(trained):
    path, model, peft, config = trained
    server = HFGenerationServer(str(path), rollout_config(seed=0))
    base = collect_lora_params(module=peft, layered_summon=False, base_sync_done=False)
    base = {replace_lora_wrapper(k, config): v for k, v in base.items()}
    assert any(".base_layer." in k for k in base)  # the names the KeyError of issue #39 named
    assert not any("visual" in k and ".base_layer." in k for k in base)  # the vision tower is not adapted
    server.update_weights(base, 1, config.to_dict(), base_sync_done=False)
    before = logits(server.model)
    adapters = collect_lora_params(module=peft, layered_summon=False, base_sync_done=True)
    assert adapters and all(".lora_A." in k or ".lora_B." in k for k in adapters)
    server.update_weights(adapters, 1, config.to_dict(), base_sync_done=True)
    assert torch.equal(logits(server.model), logits(model))
    assert not torch.allclose(before, logits(model), atol=1e-3)  # the adapters are what made the difference
    syncs = server.stats()["weight_syncs"]
    assert [s["kind"] for s in syncs] == ["base weights", "adapters"]
    full_bytes = sum(t.numel() * t.element_size() for t in base.values())
    assert syncs[1]["num_bytes"] == sum(t.numel() * t.element_size() for t in adapters.values())
    assert syncs[1]["num_bytes"] < full_bytes / 5


def test_adapters_alone_load_onto_the_served_base(trained):
    """A rollout that starts from the policy's own files (verl's load_format not dummy) gets adapters only."""
    path, model, peft, config = trained
    server = HFGenerationServer(str(path), rollout_config(seed=0))
    adapters = collect_lora_params(module=peft, layered_summon=False, base_sync_done=True)
    server.update_weights(adapters, 2, config.to_dict(), base_sync_done=True)
    assert torch.equal(logits(server.model), logits(model))


def test_a_partial_or_foreign_adapter_sync_is_refused(trained):
    path, _, peft, config = trained
    server = HFGenerationServer(str(path), rollout_config(seed=0))
    adapters = collect_lora_params(module=peft, layered_summon=False, base_sync_done=True)
    name = next(iter(adapters))
    with pytest.raises(KeyError, match="missing from the update"):
        server.update_weights({k: v for k, v in adapters.items() if k != name}, 1, config.to_dict())
    foreign = {
        **adapters,
        "base_model.model.model.visual.blocks.0.attn.qkv.lora_A.weight": torch.zeros(4, 16),
    }
    with pytest.raises(KeyError, match="does not have"):
        server.update_weights(foreign, 1, config.to_dict())


class _Engine:
    """verl's FSDP engine's ``get_per_tensor_param`` over a peft model, as its LoRA branch answers (not merged)."""

    def __init__(self, peft, config) -> None:
        self.peft, self.config, self.calls = peft, config, []

    def get_per_tensor_param(self, layered_summon=False, base_sync_done=False, **kwargs):
        self.calls.append(base_sync_done)
        params = collect_lora_params(module=self.peft, layered_summon=False, base_sync_done=base_sync_done)
        if not base_sync_done:
            params = {replace_lora_wrapper(k, self.config): v for k, v in params.items()}
        return iter(params.items()), self.config.to_dict()


def test_a_checkpoint_engine_sync_brings_the_peft_config_the_base_once_and_the_adapters_every_time(trained):
    path, model, peft, config = trained
    engine = _Engine(peft, config)
    per_tensor_param = lora_sync(_Engine.get_per_tensor_param)
    # verl's checkpoint-engine caller passes nothing (volcengine/verl#7495: verl itself then sends the base alone).
    first = list(per_tensor_param(engine)[0])
    later = list(per_tensor_param(engine)[0])
    assert first[0] == (PEFT_CONFIG_KEY, config.to_dict()) and later[0][0] == PEFT_CONFIG_KEY
    first_names, later_names = [n for n, _ in first[1:]], [n for n, _ in later[1:]]
    assert any(".base_layer." in n for n in first_names) and any(".lora_B." in n for n in first_names)
    assert later_names and all(".lora_A." in n or ".lora_B." in n for n in later_names)
    # verl's in-process (naive) caller always says which part it wants: its answer is verl's own.
    names = [n for n, _ in per_tensor_param(engine, base_sync_done=True)[0]]
    assert names == later_names and engine.calls == [True, False, True, True]

    # The hf rollout loads the first sync (base + adapters, its peft config in-band) and computes the trainer's policy.
    server = HFGenerationServer(str(path), rollout_config(seed=0), lora_adapters=True)
    state = dict(first[1:])
    server.update_weights(state, 0, first[0][1])
    assert torch.equal(logits(server.model), logits(model))
    server.update_weights(dict(later[1:]), 1, later[0][1])
    assert [s["kind"] for s in server.stats()["weight_syncs"]] == ["base weights + adapters", "adapters"]


def test_a_lora_run_refuses_a_sync_without_adapters(trained):
    """verl 0.9.1's checkpoint-engine sync unpatched: the base weights alone, no peft config, at every sync."""
    path, _, peft, config = trained
    server = HFGenerationServer(str(path), rollout_config(seed=0), lora_adapters=True)
    base = collect_lora_params(module=peft, layered_summon=False, base_sync_done=False)
    base = {replace_lora_wrapper(k, config): v for k, v in base.items()}
    with pytest.raises(ValueError, match="brought no adapters .* initial policy .*#7495"):
        server.update_weights(base, 1)
    # verl's own base sync (its peft config, base_sync_done false) is the one sync that carries none.
    server.update_weights(base, 1, config.to_dict(), base_sync_done=False)
