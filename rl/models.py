"""Load a policy (Qwen2.5-VL, Qwen3-VL, or a tiny ragym policy) with its tokenizer and processor.

One loader for every size: the tiny CPU policies and Qwen2.5-VL-7B go through the same code. The
stock Qwen processors insist on a video processor, which transformers can only build with torchvision
(absent from the CPU install; ragym feeds no video anyway), and ``AutoImageProcessor`` needs torchvision
too. So the processor is always assembled from the tokenizer and the PIL Qwen2-VL image processor
through an image-only subclass that keeps the stock class name (saved configs and verl's class-name
dispatch still see ``Qwen2_5_VLProcessor`` / ``Qwen3VLProcessor``), the same on CPU and GPU machines.
"""

from __future__ import annotations

import functools
import json
import types
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForImageTextToText,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    ProcessorMixin,
    Qwen2_5_VLModel,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessorPil,
    Qwen3VLModel,
    Qwen3VLProcessor,
)

from ragym.rl.lora import adapter_base, is_adapter_dir

_FAMILY = {
    "qwen2_5_vl": (Qwen2_5_VLProcessor, Qwen2_5_VLModel),
    "qwen3_vl": (Qwen3VLProcessor, Qwen3VLModel),
}
"""Root ``model_type`` -> (stock processor class, model class whose ``get_rope_index`` verl binds)."""
VIDEO_PROCESSORS = {
    "Qwen2_5_VLProcessor": "Qwen2VLVideoProcessor",
    "Qwen3VLProcessor": "Qwen3VLVideoProcessor",
}
"""The video processor class a real checkpoint of each processor class names."""
_VIDEO_SETTINGS = (
    "do_convert_rgb",
    "do_normalize",
    "do_rescale",
    "do_resize",
    "image_mean",
    "image_std",
    "merge_size",
    "patch_size",
    "resample",
    "rescale_factor",
    "size",
    "temporal_patch_size",
)
"""Image processor settings the named video processor takes over."""


@functools.cache
def image_only_processor_class(stock: type[ProcessorMixin]) -> type[ProcessorMixin]:
    """A subclass of ``stock`` without the video processor argument, under the stock class name."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        stock.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        out = stock.save_pretrained(self, save_directory, *args, **kwargs)
        name_video_processor(Path(save_directory) / "processor_config.json", stock.__name__)
        return out

    # Same __name__ on purpose: save_pretrained writes it as processor_class, and verl dispatches on it.
    namespace = {"__init__": __init__, "save_pretrained": save_pretrained, "__module__": __name__}
    return type(stock.__name__, (stock,), namespace)


def name_video_processor(processor_config: Path, processor_class: str) -> None:
    """Name a video processor in a saved processor config, as real Qwen-VL checkpoints do.

    ragym feeds no video, but ``AutoProcessor`` (vLLM's processor; verl's ``hf_processor`` where torchvision is
    installed) builds the family's full processor and refuses a folder without one. Written as settings, not
    saved from the class: transformers' video processors need torchvision, which a CPU install lacks."""
    settings = json.loads(processor_config.read_text())
    image = settings["image_processor"]
    settings["video_processor"] = {
        **{key: image[key] for key in _VIDEO_SETTINGS if key in image},
        "video_processor_type": VIDEO_PROCESSORS[processor_class],
    }
    processor_config.write_text(json.dumps(settings, indent=2) + "\n")


def make_processor(model_type: str, image_processor, tokenizer, chat_template: str) -> ProcessorMixin:
    """An image-only processor of ``model_type`` from parts (ragym feeds no video)."""
    if model_type not in _FAMILY:
        raise ValueError(f"unsupported model_type {model_type!r}; supported: {sorted(_FAMILY)}")
    return image_only_processor_class(_FAMILY[model_type][0])(
        image_processor, tokenizer, chat_template=chat_template
    )


def load_processor(path: str | Path) -> ProcessorMixin:
    """The model's processor, with ``get_rope_index`` bound exactly as verl's ``hf_processor`` binds it."""
    config = AutoConfig.from_pretrained(path)
    if config.model_type not in _FAMILY:
        raise ValueError(
            f"{path}: unsupported model_type {config.model_type!r}; supported: {sorted(_FAMILY)}"
        )
    model_class = _FAMILY[config.model_type][1]
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.chat_template is None:
        raise ValueError(
            f"{path}: the tokenizer has no chat template (tokenizer_config.json or chat_template.jinja)"
        )
    # Both families use the Qwen2-VL image processor (Qwen3-VL with 16-pixel patches, from its config).
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(path)
    # verl reads the config and the rope functions off the processor: attributes ProcessorMixin does not declare.
    processor: Any = make_processor(config.model_type, image_processor, tokenizer, tokenizer.chat_template)
    processor.config = config
    processor.get_rope_index = types.MethodType(model_class.get_rope_index, processor)
    processor.get_vision_position_ids = types.MethodType(model_class.get_vision_position_ids, processor)
    return processor


def position_problem(path: str | Path, prompt_length: int, response_length: int) -> str | None:
    """Why a rollout of ``prompt_length`` + ``response_length`` tokens does not fit the policy at ``path`` (a peft
    adapter folder: its base), or None: the Hugging Face engine would run it on positions the model never had, where
    vLLM refuses it. The limit is the config's ``max_position_embeddings`` (a VL model's ``text_config`` holds it);
    a config without one refuses nothing."""
    config = AutoConfig.from_pretrained(adapter_base(path) if is_adapter_dir(path) else path)
    # transformers' configs carry their fields as attributes; a model family may define no position limit.
    positions = getattr(config.get_text_config(), "max_position_embeddings", None)
    longest = prompt_length + response_length
    if positions is None or longest <= positions:
        return None
    return (
        f"actor_rollout_ref.rollout.prompt_length {prompt_length} + response_length {response_length} = {longest} "
        f"exceeds the policy's max_position_embeddings {positions} ({path}): lower them (data.max_prompt_length, "
        "data.max_response_length) or use a model with more positions"
    )


def load_policy(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    attn_implementation: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin]:
    """(model, tokenizer, processor) of a Qwen-VL policy directory, or of a peft adapter folder (its base policy
    with the adapters attached, ``ragym.rl.lora``); GPUs: ``dtype=torch.bfloat16``,
    ``attn_implementation="flash_attention_2"``; the default (None) lets transformers choose (sdpa)."""
    if is_adapter_dir(path):  # not merged, so the forward is the trainer's
        from peft import PeftModel

        model, tokenizer, processor = load_policy(adapter_base(path), dtype, device, attn_implementation)
        PeftModel.from_pretrained(model, str(path)).to(device)  # injects the LoRA layers into ``model``
        return model, tokenizer, processor
    model = AutoModelForImageTextToText.from_pretrained(
        path, dtype=dtype, attn_implementation=attn_implementation
    )
    # transformers wraps ``to`` in functools.wraps(nn.Module.to), which pyright reads as the unbound method.
    model.to(device)  # pyright: ignore[reportArgumentType]
    processor = load_processor(path)
    return model, processor.tokenizer, processor
