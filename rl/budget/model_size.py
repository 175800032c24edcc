"""A policy's parameter counts and shapes, from its Hugging Face config alone: the model is built on the meta
device (no weights allocated, nothing downloaded) and counted, with peft's LoRA adapters when the recipe has them.

The config comes from a local model folder, the Hugging Face cache, or, for every model a shipped recipe names
(Qwen2.5-VL-7B-Instruct, Qwen3-VL-8B-Instruct), the official ``config.json`` fields kept here (``KNOWN_CONFIGS``), so
``ragym budget memory`` and ``ragym budget gpu-check`` work on a machine that has never downloaded the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ragym.rl.errors import UsageError
from ragym.rl.lora import LoraSettings

QWEN2_5_VL_7B: dict[str, Any] = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 128000,
    "max_window_layers": 28,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 152064,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    },
}
"""Qwen/Qwen2.5-VL-7B-Instruct's ``config.json`` on the Hugging Face hub (8,292,166,656 parameters)."""
QWEN3_VL_8B: dict[str, Any] = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_vl_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "dtype": "bfloat16",
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "max_position_embeddings": 262144,
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000,
        "use_cache": True,
        "vocab_size": 151936,
    },
    "vision_config": {
        "model_type": "qwen3_vl",
        "deepstack_visual_indexes": [8, 16, 24],
        "depth": 27,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 4304,
        "num_heads": 16,
        "num_position_embeddings": 2304,
        "out_hidden_size": 4096,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}
"""Qwen/Qwen3-VL-8B-Instruct's ``config.json`` on the Hugging Face hub (8,767,123,696 parameters, the hub's 8.77B)."""
KNOWN_CONFIGS = {"Qwen2.5-VL-7B-Instruct": QWEN2_5_VL_7B, "Qwen3-VL-8B-Instruct": QWEN3_VL_8B}
"""Configs kept in ragym, by the model folder's or hub id's last part (what the recipes name)."""
VISION_PREFIX = "visual."
"""Qwen-VL's vision tower and merger: parameter names containing ``.visual.`` or starting with ``visual.``."""


@dataclass(frozen=True)
class ModelShape:
    """What the memory arithmetic needs of a policy: its counts (from the model built on the meta device) and the
    language model's dimensions (from its config)."""

    num_params: int
    """Every weight of the model, vision tower included."""
    num_vision_params: int
    """The vision tower's and its merger's weights."""
    num_layer_params: int
    """One language-model decoder layer's weights: the largest unit FSDP gathers (verl wraps decoder layers)."""
    num_lora_params: int
    """Trainable adapter weights (peft's count with the recipe's LoRA); 0 without LoRA."""
    num_layers: int
    """Language-model decoder layers."""
    hidden_size: int
    """Language-model width h."""
    intermediate_size: int
    """MLP width i."""
    kv_size: int
    """Key (= value) width per token: key/value heads x head dim."""
    vocab_size: int
    """Output vocabulary V (the logits' width)."""
    vision_depth: int
    """Vision-tower blocks."""
    vision_hidden_size: int
    """Vision-tower width hv (its attention has no grouped key/value heads: k and v are hv wide too)."""
    vision_mlp_values: int
    """Values a vision block's MLP keeps per patch: 4 x iv gated (Qwen2.5-VL: gate, up, SiLU(gate), product), 2 x
    iv plain (Qwen3-VL: fc1 and GELU(fc1))."""
    patch_values: int
    """Pixel values per patch: channels x temporal patch x patch x patch (1,176 for Qwen2.5-VL, 1,536 for Qwen3-VL)."""
    patches_per_token: int
    """Patches merged into one language-model token: spatial merge size squared (4)."""
    vision_lora: bool
    """Whether the LoRA adapters reach the vision tower (the recipes exclude it: it stays frozen under LoRA)."""


def load_model_config(model: str, config_path: str | None = None) -> tuple[Any, str]:
    """(transformers config, where it came from) of ``model`` (a recipe's ``actor_rollout_ref.model.path``):
    ``config_path`` (a config.json or a folder with one) when given, else the model's local folder, else the
    Hugging Face cache, else ragym's copy of a known model's config. Nothing is downloaded."""
    from transformers import AutoConfig

    for source in ([config_path] if config_path else []) + [model]:
        path = Path(source)
        file = path / "config.json" if path.is_dir() else path
        if file.is_file() and file.suffix == ".json":
            return config_from_dict(json.loads(file.read_text())), str(file)
        if config_path:
            raise UsageError(f"--model-config {config_path}: neither a config.json nor a folder holding one")
    try:
        return AutoConfig.from_pretrained(model, local_files_only=True), f"{model} (Hugging Face cache)"
    except (OSError, ValueError):
        pass
    known = KNOWN_CONFIGS.get(Path(model).name)
    if known is None:
        raise UsageError(
            f"no config for {model}: not a local folder, not in the Hugging Face cache, and ragym keeps configs of "
            f"{', '.join(KNOWN_CONFIGS)} only; pass --model-config PATH (the model's config.json)"
        )
    return config_from_dict(known), f"ragym's copy of the official {Path(model).name} config.json"


def config_from_dict(fields: dict[str, Any]) -> Any:
    """A transformers config from ``config.json`` fields (its ``model_type`` picks the class)."""
    from transformers import AutoConfig

    fields = dict(fields)
    model_type = fields.pop("model_type", None)
    if model_type is None:
        raise UsageError("the model config has no model_type")
    return AutoConfig.for_model(model_type, **fields)


def build_on_meta(config: Any, lora: LoraSettings | None = None) -> torch.nn.Module:
    """The model of ``config`` on the meta device (shapes only, no memory), wrapped in peft's adapters when
    ``lora`` is given, as both engines wrap it."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    with torch.device("meta"):
        try:
            model = AutoModelForImageTextToText.from_config(config)
        except ValueError:  # a text-only policy
            model = AutoModelForCausalLM.from_config(config)
        if lora is not None:
            from peft import get_peft_model

            model = get_peft_model(model, lora.peft_config())
    return model


def model_shape(config: Any, lora: LoraSettings | None = None) -> ModelShape:
    """Count ``config``'s model built on the meta device (with ``lora``'s adapters) and read its dimensions."""
    model = build_on_meta(config, lora)
    params = dict(model.named_parameters())
    num_lora = sum(p.numel() for p in params.values() if p.requires_grad) if lora is not None else 0
    base = {name: p for name, p in params.items() if "lora_" not in name}
    text, vision = config.get_text_config(), config.vision_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    gated = any(_is_vision(name) and ".blocks.0.mlp.gate_proj." in name for name in base)
    patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    return ModelShape(
        num_params=sum(p.numel() for p in base.values()),
        num_vision_params=sum(p.numel() for name, p in base.items() if _is_vision(name)),
        num_layer_params=sum(
            p.numel() for name, p in base.items() if ".layers.0." in name and not _is_vision(name)
        ),
        num_lora_params=num_lora,
        num_layers=text.num_hidden_layers,
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        kv_size=text.num_key_value_heads * head_dim,
        vocab_size=text.vocab_size,
        vision_depth=vision.depth,
        vision_hidden_size=vision.hidden_size,
        vision_mlp_values=(4 if gated else 2) * vision.intermediate_size,
        patch_values=patch,
        patches_per_token=vision.spatial_merge_size**2,
        vision_lora=any(_is_vision(name) and "lora_" in name for name in params),
    )


def _is_vision(name: str) -> bool:
    return name.startswith(VISION_PREFIX) or f".{VISION_PREFIX}" in name
