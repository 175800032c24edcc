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
import types
from pathlib import Path

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

_FAMILY = {
    "qwen2_5_vl": (Qwen2_5_VLProcessor, Qwen2_5_VLModel),
    "qwen3_vl": (Qwen3VLProcessor, Qwen3VLModel),
}
"""Root ``model_type`` -> (stock processor class, model class whose ``get_rope_index`` verl binds)."""


@functools.cache
def image_only_processor_class(stock: type[ProcessorMixin]) -> type[ProcessorMixin]:
    """A subclass of ``stock`` without the video processor argument, under the stock class name."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        stock.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    # Same __name__ on purpose: save_pretrained writes it as processor_class, and verl dispatches on it.
    return type(stock.__name__, (stock,), {"__init__": __init__, "__module__": __name__})


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
    processor = make_processor(config.model_type, image_processor, tokenizer, tokenizer.chat_template)
    processor.config = config
    processor.get_rope_index = types.MethodType(model_class.get_rope_index, processor)
    processor.get_vision_position_ids = types.MethodType(model_class.get_vision_position_ids, processor)
    return processor


def load_policy(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    attn_implementation: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin]:
    """(model, tokenizer, processor) of a Qwen-VL policy directory; GPUs: ``dtype=torch.bfloat16``,
    ``attn_implementation="flash_attention_2"``; the default (None) lets transformers choose (sdpa)."""
    model = AutoModelForImageTextToText.from_pretrained(
        path, dtype=dtype, attn_implementation=attn_implementation
    )
    model.to(device)
    processor = load_processor(path)
    return model, processor.tokenizer, processor
