"""``ragym budget memory``: parameter counts from the model built on the meta device, checked against hand arithmetic
on Qwen2.5-VL-7B's config and against a tiny policy built for real; the per-GPU memory of the LoRA recipes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ragym.rl.budget.memory import GIB, memory_settings, memory_table
from ragym.rl.budget.model_size import QWEN2_5_VL_7B, config_from_dict, load_model_config, model_shape
from ragym.rl.cli import main
from ragym.rl.lora import VISION_TOWER, LoraSettings, add_adapters
from ragym.rl.recipe.compose import load_recipe

# Qwen2.5-VL-7B-Instruct's config.json: the language model's and the vision tower's sizes.
V, H, MLP, KV, L = 152064, 3584, 18944, 4 * 128, 28
HV, IV, DEPTH = 1280, 3420, 32
LAYER = (
    (H * H + H) + 2 * (H * KV + KV) + H * H + 3 * H * MLP + 2 * H
)  # q (bias), k, v (bias), o, MLP, 2 norms
VISION = (3 * 2 * 14 * 14 * HV  # Conv3d patch embedding, no bias
          + DEPTH * (2 * HV + (HV * 3 * HV + 3 * HV) + (HV * HV + HV) + 2 * (HV * IV + IV) + (IV * HV + HV))
          + HV + (4 * HV * 4 * HV + 4 * HV) + (4 * HV * H + H))  # merger: norm, 2x2 patches -> 4HV -> H  # fmt: skip
TOTAL = 2 * V * H + L * LAYER + H + VISION  # untied embeddings and head, final norm
LORA_64 = 64 * L * (9 * H + 2 * KV + 3 * MLP)  # r x (in + out) over q, k, v, o, gate, up, down of every layer


def lora(rank: int) -> LoraSettings:
    return LoraSettings(rank=rank, alpha=rank, target_modules="all-linear", exclude_modules=VISION_TOWER,
                        adapter_path=None)  # fmt: skip


@pytest.fixture(scope="module")
def shape_7b():
    return model_shape(config_from_dict(QWEN2_5_VL_7B), lora(64))


def test_qwen2_5_vl_7b_counts_equal_the_hand_arithmetic(shape_7b) -> None:
    assert (
        (shape_7b.num_params, shape_7b.num_vision_params) == (TOTAL, VISION) == (8_292_166_656, 676_550_144)
    )
    assert shape_7b.num_layer_params == LAYER
    assert shape_7b.num_lora_params == LORA_64 == 161_480_704
    # The recipe's comment: the rank-64 adapters are 1.95% of the weights.
    assert f"{shape_7b.num_lora_params / shape_7b.num_params:.2%}" == "1.95%"
    assert (shape_7b.num_layers, shape_7b.hidden_size, shape_7b.intermediate_size) == (L, H, MLP)
    assert (shape_7b.kv_size, shape_7b.vocab_size) == (KV, V)


def test_meta_counts_equal_a_tiny_policy_built_for_real(tiny_policy_dir: Callable[[str], Path]) -> None:
    from transformers import AutoModelForImageTextToText

    folder = tiny_policy_dir("qwen2_5_vl")
    config, source = load_model_config(str(folder))
    assert source == str(folder / "config.json")
    shape = model_shape(config, lora(8))
    model = AutoModelForImageTextToText.from_pretrained(folder)
    assert shape.num_params == sum(p.numel() for p in model.parameters())
    peft = add_adapters(model, lora(8), folder)
    trainable = [p for p in peft.parameters() if p.requires_grad]
    assert trainable and all(p.device.type == "cpu" for p in trainable)
    assert shape.num_lora_params == sum(p.numel() for p in trainable)


def test_single_gpu_lora_recipe_fits_80_gib_and_full_fine_tuning_does_not(shape_7b) -> None:
    config = load_recipe("kbvqa_qwen2_5_vl_7b_lora_single_gpu")
    settings = memory_settings(config)
    assert (settings.num_gpus, settings.num_shards, settings.tokens, settings.checkpointing) == (
        1,
        1,
        16384,
        True,
    )
    _, numbers = memory_table(shape_7b, settings, 80, 64)
    full, lora_ = numbers["full"], numbers["lora"]
    # fp32 weights, unsharded; LoRA's gradients and Adam moments are the adapters' alone.
    assert full["weights"] == lora_["weights"] == pytest.approx(TOTAL * 4 / GIB)
    assert (full["gradients"], lora_["gradients"]) == pytest.approx((TOTAL * 4 / GIB, LORA_64 * 4 / GIB))
    assert (full["adam"], lora_["adam"]) == pytest.approx((TOTAL * 8 / GIB, LORA_64 * 8 / GIB))
    # Checkpointed: 28 layer inputs of 16,384 x 3,584 in bf16, plus one layer recomputed.
    act = (L * 16384 * H * 2 + 16384 * (6 * H + 2 * KV + 4 * MLP) * 2) / GIB
    assert lora_["activations"] == pytest.approx(act)
    # Rollout: vLLM's half of the GPU beside the fp32 base and the adapters' Adam moments.
    assert lora_["rollout"] == pytest.approx(40 + (TOTAL * 4 + LORA_64 * 8) / GIB)
    assert lora_["fits"] and lora_["peak"] < 80 - 4  # a few GiB left for CUDA contexts
    assert not full["fits"] and full["weights"] + full["gradients"] + full["adam"] > 80
    assert lora_["kv_tokens"] >= 16384 * 8  # a group of 8 full-length episodes fits the KV cache


def test_eight_gpu_lora_recipe_shards_over_the_node(shape_7b) -> None:
    settings = memory_settings(load_recipe("kbvqa_qwen2_5_vl_7b_lora"))
    assert (settings.num_gpus, settings.num_shards, settings.tokens) == (8, 8, 32768)
    _, numbers = memory_table(shape_7b, settings, 80, 64)
    assert numbers["full"]["weights"] == pytest.approx(TOTAL * 4 / 8 / GIB)
    assert numbers["lora"]["fits"] and numbers["full"]["fits"]
    assert numbers["lora"]["peak"] < numbers["full"]["peak"]


def test_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "memory", "--recipe", "kbvqa_qwen2_5_vl_7b_lora_single_gpu"]) == 0
    out = capsys.readouterr().out
    assert "8,292,166,656 parameters" in out and "161,480,704 (1.95%)" in out
    assert "ragym's copy of the official Qwen2.5-VL-7B-Instruct config.json" in out
    peak = next(line for line in out.splitlines() if line.startswith("| **peak**"))
    assert "does not fit" in peak.split("|")[2] and " fits (" in peak.split("|")[3]


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = ["budget", "memory", "--recipe", "kbvqa_qwen2_5_vl_7b_lora_single_gpu"]
    for argv, message in [
        ([*recipe, "actor_rollout_ref.model.path=/nonexistent/Some-Model-13B"], "pass --model-config PATH"),
        ([*recipe, "--model-config", "/nonexistent/config.json"], "neither a config.json nor a folder"),
        ([*recipe, "--gpu-gib", "0"], "--gpu-gib must be > 0"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
