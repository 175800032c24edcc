"""``ragym budget memory``: parameter counts from the model built on the meta device, checked against hand arithmetic
on Qwen2.5-VL-7B's config and against a tiny policy built for real; the per-GPU memory of the LoRA recipes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ragym.rl.budget.memory import GIB, memory_settings, memory_table
from ragym.rl.budget.model_size import (
    QWEN2_5_VL_7B,
    QWEN3_VL_8B,
    config_from_dict,
    load_model_config,
    model_shape,
)
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
VISION = (
    3 * 2 * 14 * 14 * HV  # Conv3d patch embedding, no bias
    + DEPTH * (2 * HV + (HV * 3 * HV + 3 * HV) + (HV * HV + HV) + 2 * (HV * IV + IV) + (IV * HV + HV))
    + HV
    + (4 * HV * 4 * HV + 4 * HV)
    + (4 * HV * H + H)
)  # merger: norm, 2x2 patches -> 4HV -> H
TOTAL = 2 * V * H + L * LAYER + H + VISION  # untied embeddings and head, final norm
LORA_64 = 64 * L * (9 * H + 2 * KV + 3 * MLP)  # r x (in + out) over q, k, v, o, gate, up, down of every layer
KV_BYTES_PER_TOKEN = 2 * L * KV * 2  # a key and a value in every layer, bf16: 57,344 bytes
PATCH = 3 * 2 * 14 * 14  # pixel values of a patch: channels x temporal patch x 14 x 14
# Qwen3-VL-8B-Instruct's config.json: head_dim 128, 32 query and 8 key/value heads, q/k norms, no biases; its vision
# tower's MLP is plain (fc1, GELU, fc2), patches 16 x 16, three DeepStack mergers beside the last one.
V3, H3, MLP3, KV3, L3, Q3 = 151936, 4096, 12288, 8 * 128, 36, 32 * 128
HV3, IV3, DEPTH3, PATCH3 = 1152, 4304, 27, 3 * 2 * 16 * 16
LAYER3 = (
    H3 * Q3 + 2 * H3 * KV3 + Q3 * H3 + 2 * 128 + 3 * H3 * MLP3 + 2 * H3
)  # q, k, v, o, q/k norms, MLP, norms
MERGER3 = 2 * HV3 + (4 * HV3 * 4 * HV3 + 4 * HV3) + (4 * HV3 * H3 + H3)  # norm over hv, 4hv -> 4hv -> H
DEEPSTACK3 = 2 * 4 * HV3 + (4 * HV3 * 4 * HV3 + 4 * HV3) + (4 * HV3 * H3 + H3)  # norm over 4hv
VISION3 = (
    PATCH3 * HV3
    + HV3
    + 2304 * HV3  # Conv3d patch embedding with bias, learned position embeddings
    + DEPTH3
    * (4 * HV3 + (HV3 * 3 * HV3 + 3 * HV3) + (HV3 * HV3 + HV3) + (HV3 * IV3 + IV3) + (IV3 * HV3 + HV3))
    + MERGER3
    + 3 * DEEPSTACK3
)
TOTAL3 = 2 * V3 * H3 + L3 * LAYER3 + H3 + VISION3
LORA3_64 = 64 * L3 * (H3 + Q3 + 2 * (H3 + KV3) + Q3 + H3 + 3 * (H3 + MLP3))  # q, k, v, o, gate, up, down


def lora(rank: int) -> LoraSettings:
    return LoraSettings(
        rank=rank, alpha=rank, target_modules="all-linear", exclude_modules=VISION_TOWER, adapter_path=None
    )


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


def test_qwen3_vl_8b_counts_equal_the_hand_arithmetic() -> None:
    shape = model_shape(config_from_dict(QWEN3_VL_8B), lora(64))
    # The hub's model card: 8.77B parameters.
    assert (shape.num_params, shape.num_vision_params) == (TOTAL3, VISION3) == (8_767_123_696, 576_388_336)
    assert (shape.num_layer_params, shape.num_lora_params) == (LAYER3, LORA3_64)
    assert (shape.num_layers, shape.hidden_size, shape.intermediate_size, shape.kv_size) == (
        L3,
        H3,
        MLP3,
        KV3,
    )
    assert (shape.vision_depth, shape.vision_hidden_size, shape.vision_mlp_values) == (DEPTH3, HV3, 2 * IV3)
    assert (shape.patch_values, shape.patches_per_token, shape.vision_lora) == (PATCH3, 4, False)


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
    # 15 images of 1,024 tokens (+ 2 markers) fill 15,390 of the 16,384 tokens: 61,440 patches of 1,176 fp32 values.
    patches = 15 * 1024 * 4
    assert lora_["vision_inputs"] == full["vision_inputs"] == pytest.approx(patches * PATCH * 4 / GIB)
    # The frozen tower (LoRA) needs one block at a time; the trained one keeps each checkpointed block's input.
    block = patches * (12 * HV + 4 * IV) * 2
    assert (lora_["vision"], full["vision"]) == pytest.approx(
        (block / GIB, (DEPTH * patches * HV * 2 + block) / GIB)
    )
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
        ([*recipe, "--images", "16"], "holds 0 to 15 images of 1,024 tokens"),
        # A zero count divided the memory by it (ZeroDivisionError); a negative one printed a table.
        (
            [*recipe, "trainer.n_gpus_per_node=0"],
            "trainer.n_gpus_per_node 0 is not a whole number of at least 1",
        ),
        (
            [*recipe, "actor_rollout_ref.actor.fsdp_config.fsdp_size=0"],
            "fsdp_size=1 or more (or -1: every GPU)",
        ),
        ([*recipe, "data.max_response_length=-5"], "rollout.response_length -5 is not a whole number"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_the_sequence_is_the_rollout_lengths_the_agent_loop_cuts_at() -> None:
    """The update's sequence was sized from data.max_*, though verl's agent loop pads and cuts at the rollout keys
    (data.max_* only set them by default): a response_length set apart was not counted."""
    recipe = "kbvqa_qwen2_5_vl_7b_lora_single_gpu"
    assert memory_settings(load_recipe(recipe)).sequence_tokens == 4096 + 12288
    apart = ["actor_rollout_ref.rollout.response_length=20000"]
    assert memory_settings(load_recipe(recipe, apart)).sequence_tokens == 4096 + 20000


SHIPPED = [
    # (recipe, model, GPUs = FSDP shards, micro-batch tokens per GPU, vLLM's share, prompt + response tokens), from
    # the recipe files: trainer.n_gpus_per_node, ppo_max_token_len_per_gpu (single GPU: 1 episode a micro-batch),
    # rollout.gpu_memory_utilization, data.max_prompt_length + data.max_response_length. Every recipe's largest
    # image is 1,024 tokens (802,816 pixels / 28^2; Qwen3-VL 1,048,576 / 32^2).
    ("kbvqa_qwen2_5_vl_7b", "7b", 8, 32768, 0.6, 4096 + 12288),
    ("kbvqa_qwen2_5_vl_7b_lora", "7b", 8, 32768, 0.6, 4096 + 12288),
    ("kbvqa_qwen2_5_vl_7b_lora_single_gpu", "7b", 1, 4096 + 12288, 0.5, 4096 + 12288),
    ("docmemo_qwen2_5_vl_7b", "7b", 8, 32768, 0.6, 4096 + 16384),
    ("memora_qwen2_5_vl_7b", "7b", 8, 32768, 0.6, 8192 + 24576),
    ("r3g_qwen2_5_vl_7b", "7b", 8, 24576, 0.6, 4096 + 12288),
    ("kbvqa_qwen3_vl_8b", "8b", 8, 32768, 0.6, 4096 + 12288),
]
"""Every shipped recipe of Qwen2.5-VL-7B and Qwen3-VL-8B (the models whose configs ragym keeps); fp32 FSDP shards,
gradient checkpointing, no offload and vLLM's TP 1 in each."""
MODELS = {
    # name: (V, h, i, kv, L, P, P_layer, LoRA rank 64, vision hv, its MLP values per patch, depth, patch values)
    "7b": (V, H, MLP, KV, L, TOTAL, LAYER, LORA_64, HV, 4 * IV, DEPTH, PATCH),
    "8b": (V3, H3, MLP3, KV3, L3, TOTAL3, LAYER3, LORA3_64, HV3, 2 * IV3, DEPTH3, PATCH3),
}


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.2f}"


def hand_table(
    model: str,
    gpus: int,
    tokens: int,
    share: float,
    episode: int,
    images: int | None = None,
    per_logit: int = 4,
) -> dict[str, tuple[str, str]]:
    """Every row of ``ragym budget memory``'s table on 80 GiB GPUs (full fine-tuning, LoRA rank 64), by hand from
    the config's numbers and the recipe's knobs (the formulas of ``ragym.rl.budget.memory``'s docstring)."""
    v, h, i, kv, layers, total, layer_params, lora_64, hv, vision_mlp, depth, patch = MODELS[model]
    gpu = 80 * GIB
    layer = tokens * (6 * h + 2 * kv + 4 * i) * 2  # one decoder layer's activations, bf16
    checkpointed = layers * tokens * h * 2 + layer  # every layer's input, plus one layer recomputed
    images = tokens // 1026 if images is None else images  # 1,024 visual tokens + 2 markers each
    patches = images * 1024 * 4
    block = patches * (12 * hv + vision_mlp) * 2  # one vision block's tensors
    tower = {"full": depth * patches * hv * 2 + block, "lora": block}  # trained + checkpointed, frozen
    vllm = round(share * gpu)  # 48 or 40 GiB: whole bytes
    kv_bytes = 2 * layers * kv * 2
    cells: dict[str, list[str]] = {}
    for column, trainable, served in (("full", total, total), ("lora", lora_64, total + lora_64)):
        weights, gradients, adam = total * 4 / gpus, trainable * 4 / gpus, 2 * trainable * 4 / gpus
        vision = patches * patch * 4 + tower[column]
        training = (
            weights + gradients + adam + 2 * layer_params * 2 + checkpointed + vision + tokens * v * per_logit
        )
        kv_tokens = (vllm - served * 2) // kv_bytes
        rollout = vllm + weights + adam  # nothing offloaded
        peak = max(training, rollout)
        verdict = (
            f"fits ({_gib(gpu - peak)} free)" if peak <= gpu else f"does not fit ({_gib(peak - gpu)} over)"
        )
        how = "checkpointed" if column == "full" else "frozen: one block at a time"
        column_cells = {
            "weights": _gib(weights),
            "gradients": _gib(gradients),
            "adam": _gib(adam),
            "gathered": _gib(2 * layer_params * 2),
            "activations": _gib(checkpointed),
            "unchecked": _gib(layers * layer),
            "inputs": _gib(patches * patch * 4),
            "tower": f"{_gib(tower[column])} ({how})",
            "logits": _gib(tokens * v * per_logit),
            "training": _gib(training),
            "vllm": _gib(vllm),
            "vllm weights": _gib(served * 2),
            "kv": f"{_gib(vllm - served * 2)} ({kv_tokens:,} tokens, {kv_tokens // episode} episodes)",
            "rollout": _gib(rollout),
            "peak": f"{_gib(peak)} {verdict}",
        }
        for key, value in column_cells.items():
            cells.setdefault(key, []).append(value)
    shard = f"32-bit, 1/{gpus} shard"
    path = "verl" if per_logit == 4 else "labels"
    labels = {
        "weights": f"weights ({shard})",
        "gradients": f"gradients ({shard})",
        "adam": f"Adam moments (2 x {shard})",
        "gathered": "gathered FSDP units (2 decoder layers, bf16)",
        "activations": f"activations (checkpointed, {tokens:,} tokens)",
        "unchecked": "activations without checkpointing (not added)",
        "inputs": f"vision inputs ({images} x 1,024-token images: {patches:,} patches x {patch:,} x 4 B)",
        "tower": "vision tower activations",
        "logits": f"logits ({tokens:,} x {v:,} x {per_logit} B, {path} log-probs)",
        "training": "**training phase**",
        "vllm": f"vLLM ({share:.2f} x 80 GiB)",
        "vllm weights": "- its weights (bf16, TP 1; LoRA: + adapters)",
        "kv": "- KV cache, at most",
        "rollout": "**rollout phase** (vLLM + weights + Adam moments)",
        "peak": "**peak** of 80 GiB",
    }
    rows = {"trainable parameters": (f"{total:,}", f"{lora_64:,} ({lora_64 / total:.2%})")}
    rows.update({labels[key]: (full, lora_) for key, (full, lora_) in cells.items()})
    return rows


def printed_table(out: str) -> dict[str, tuple[str, str]]:
    """The table's rows as printed: label -> (full fine-tuning, LoRA)."""
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0][2:]: (cells[1], cells[2][:-2]) for cells in rows[1:]}  # after the header row


@pytest.mark.parametrize(
    ("recipe", "model", "gpus", "tokens", "share", "episode"), SHIPPED, ids=[s[0] for s in SHIPPED]
)
def test_printed_figures_of_every_shipped_recipe_are_the_hand_arithmetic(
    capsys: pytest.CaptureFixture[str],
    recipe: str,
    model: str,
    gpus: int,
    tokens: int,
    share: float,
    episode: int,
) -> None:
    """Each figure ``ragym budget memory`` prints, exactly, offline: a user sizes GPUs and the rollout's KV cache by
    them."""
    assert main(["budget", "memory", "--recipe", recipe]) == 0
    out = capsys.readouterr().out
    assert f"on {gpus} GPU(s) of 80 GiB, FSDP over {gpus}," in out
    assert (
        f"micro-batch: {tokens:,} tokens per GPU" in out and f"one episode at most {episode:,} tokens" in out
    )
    assert "ragym's copy of the official" in out
    assert printed_table(out) == hand_table(model, gpus, tokens, share, episode)


@pytest.mark.parametrize(("images", "logprobs"), [(1, "verl"), (12, "verl"), (1, "labels")])
def test_the_h200_cases_are_the_hand_arithmetic(
    capsys: pytest.CaptureFixture[str], images: int, logprobs: str
) -> None:
    """The single-GPU LoRA recipe at the H200 check's settings (docs/training.md: 1 or 12 images of 1,024 tokens,
    verl's or transformers' labels log-prob path): every printed figure, by hand."""
    argv = ["budget", "memory", "--recipe", "kbvqa_qwen2_5_vl_7b_lora_single_gpu", "--images", str(images)]
    assert main([*argv, "--logprobs", logprobs]) == 0
    out = capsys.readouterr().out
    assert f"images: {images} of 1,024 visual tokens per micro-batch (--images); log-probs: {logprobs}" in out
    per_logit = 4 if logprobs == "verl" else 14
    assert printed_table(out) == hand_table("7b", 1, 16384, 0.5, 16384, images, per_logit)
