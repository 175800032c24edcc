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

# Qwen2.5-VL-7B-Instruct's config.json: the language model's and the vision tower's sizes. KV: 4 key/value heads of
# 128 dimensions (hidden size 3,584 / 28 attention heads).
V, H, MLP, KV, L = 152064, 3584, 18944, 4 * (3584 // 28), 28
HV, IV, DEPTH = 1280, 3420, 32
LAYER = (
    (H * H + H) + 2 * (H * KV + KV) + H * H + 3 * H * MLP + 2 * H
)  # q (bias), k, v (bias), o, MLP, 2 norms
VISION = (3 * 2 * 14 * 14 * HV  # Conv3d patch embedding, no bias
          + DEPTH * (2 * HV + (HV * 3 * HV + 3 * HV) + (HV * HV + HV) + 2 * (HV * IV + IV) + (IV * HV + HV))
          + HV + (4 * HV * 4 * HV + 4 * HV) + (4 * HV * H + H))  # merger: norm, 2x2 patches -> 4HV -> H  # fmt: skip
TOTAL = 2 * V * H + L * LAYER + H + VISION  # untied embeddings and head, final norm
LORA_64 = 64 * L * (9 * H + 2 * KV + 3 * MLP)  # r x (in + out) over q, k, v, o, gate, up, down of every layer
KV_BYTES_PER_TOKEN = 2 * L * KV * 2  # a key and a value in every layer, bf16: 57,344 bytes


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
    # What is left of vLLM's 40 GiB after its bf16 weights and adapters holds a group of 8 full-length episodes.
    assert (
        lora_["kv_tokens"] == (40 * GIB - (TOTAL + LORA_64) * 2) // KV_BYTES_PER_TOKEN == 454_143 > 16384 * 8
    )


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


SHIPPED = [
    # (recipe, GPUs = FSDP shards, micro-batch tokens per GPU, vLLM's share, prompt + response tokens), from the
    # recipe files: trainer.n_gpus_per_node, ppo_max_token_len_per_gpu (single GPU: 1 episode a micro-batch),
    # rollout.gpu_memory_utilization, data.max_prompt_length + data.max_response_length.
    ("kbvqa_qwen2_5_vl_7b", 8, 32768, 0.6, 4096 + 12288),
    ("kbvqa_qwen2_5_vl_7b_lora", 8, 32768, 0.6, 4096 + 12288),
    ("kbvqa_qwen2_5_vl_7b_lora_single_gpu", 1, 4096 + 12288, 0.5, 4096 + 12288),
    ("docmemo_qwen2_5_vl_7b", 8, 32768, 0.6, 4096 + 16384),
    ("memora_qwen2_5_vl_7b", 8, 32768, 0.6, 8192 + 24576),
    ("r3g_qwen2_5_vl_7b", 8, 24576, 0.6, 4096 + 12288),
]
"""Every shipped recipe of Qwen2.5-VL-7B (the model whose config ragym keeps); fp32 FSDP shards, gradient
checkpointing, no offload and vLLM's TP 1 in each."""


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.2f}"


def hand_table(gpus: int, tokens: int, share: float, episode: int) -> dict[str, tuple[str, str]]:
    """Every row of ``ragym budget memory``'s table on 80 GiB GPUs (full fine-tuning, LoRA rank 64), by hand from
    the config's numbers and the recipe's knobs (the formulas of ``ragym.rl.budget.memory``'s docstring)."""
    gpu = 80 * GIB
    layer = tokens * (6 * H + 2 * KV + 4 * MLP) * 2  # one decoder layer's activations, bf16
    checkpointed = L * tokens * H * 2 + layer  # every layer's input, plus one layer recomputed
    vllm = round(share * gpu)  # 48 or 40 GiB: whole bytes
    cells: dict[str, list[str]] = {}
    for trainable, served in ((TOTAL, TOTAL), (LORA_64, TOTAL + LORA_64)):  # full, then LoRA
        weights, gradients, adam = TOTAL * 4 / gpus, trainable * 4 / gpus, 2 * trainable * 4 / gpus
        training = weights + gradients + adam + 2 * LAYER * 2 + checkpointed + tokens * V * 4
        kv_tokens = (vllm - served * 2) // KV_BYTES_PER_TOKEN
        rollout = vllm + weights + adam  # nothing offloaded
        peak = max(training, rollout)
        verdict = (
            f"fits ({_gib(gpu - peak)} free)" if peak <= gpu else f"does not fit ({_gib(peak - gpu)} over)"
        )
        column = {
            "weights": _gib(weights), "gradients": _gib(gradients), "adam": _gib(adam), "gathered": _gib(2 * LAYER * 2),
            "activations": _gib(checkpointed), "unchecked": _gib(L * layer), "logits": _gib(tokens * V * 4),
            "training": _gib(training), "vllm": _gib(vllm), "vllm weights": _gib(served * 2),
            "kv": f"{_gib(vllm - served * 2)} ({kv_tokens:,} tokens, {kv_tokens // episode} episodes)",
            "rollout": _gib(rollout), "peak": f"{_gib(peak)} {verdict}",
        }  # fmt: skip
        for key, value in column.items():
            cells.setdefault(key, []).append(value)
    shard = f"32-bit, 1/{gpus} shard"
    labels = {
        "weights": f"weights ({shard})", "gradients": f"gradients ({shard})", "adam": f"Adam moments (2 x {shard})",
        "gathered": "gathered FSDP units (2 decoder layers, bf16)",
        "activations": f"activations (checkpointed, {tokens:,} tokens)",
        "unchecked": "activations without checkpointing (not added)",
        "logits": f"logits ({tokens:,} x {V:,} x 4 B)", "training": "**training phase**",
        "vllm": f"vLLM ({share:.2f} x 80 GiB)", "vllm weights": "- its weights (bf16, TP 1; LoRA: + adapters)",
        "kv": "- KV cache, at most", "rollout": "**rollout phase** (vLLM + weights + Adam moments)",
        "peak": "**peak** of 80 GiB",
    }  # fmt: skip
    rows = {"trainable parameters": (f"{TOTAL:,}", f"{LORA_64:,} ({LORA_64 / TOTAL:.2%})")}
    rows.update({labels[key]: (full, lora_) for key, (full, lora_) in cells.items()})
    return rows


def printed_table(out: str) -> dict[str, tuple[str, str]]:
    """The table's rows as printed: label -> (full fine-tuning, LoRA)."""
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0][2:]: (cells[1], cells[2][:-2]) for cells in rows[1:]}  # after the header row


@pytest.mark.parametrize(
    ("recipe", "gpus", "tokens", "share", "episode"), SHIPPED, ids=[s[0] for s in SHIPPED]
)
def test_printed_figures_of_every_shipped_recipe_are_the_hand_arithmetic(
    capsys: pytest.CaptureFixture[str], recipe: str, gpus: int, tokens: int, share: float, episode: int
) -> None:
    """Each figure ``ragym budget memory`` prints, exactly: a user sizes GPUs and the rollout's KV cache by them."""
    assert main(["budget", "memory", "--recipe", recipe]) == 0
    out = capsys.readouterr().out
    assert f"on {gpus} GPU(s) of 80 GiB, FSDP over {gpus}," in out
    assert (
        f"micro-batch: {tokens:,} tokens per GPU" in out and f"one episode at most {episode:,} tokens" in out
    )
    assert printed_table(out) == hand_table(gpus, tokens, share, episode)
