"""A tiny Qwen2.5-VL / Qwen3-VL model, tokenizer and image processor built from config for engine tests."""

from __future__ import annotations

import functools

import torch
from transformers import (
    GenerationConfig,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

from ragym.rl.tiny.policy import train_tokenizer

CORPUS = [
    "<|im_start|>user\nWhich entity is shown? <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n",
    "<|im_start|>assistant\n<reason>compare the codes</reason><rerank>Reject()</rerank><|im_end|>\n",
    "<reason>search</reason><search_call>SearchImage(1)</search_call> <answer>Paris</answer>",
] * 20


@functools.lru_cache(maxsize=1)
def tokenizer():
    """A small byte-level BPE tokenizer with Qwen's special tokens."""
    return train_tokenizer(CORPUS, vocab_size=400)


def build_model(arch: str = "qwen2_5_vl", seed: int = 0) -> torch.nn.Module:
    """A randomly initialised tiny ``arch`` model (float32, eval mode)."""
    tok = tokenizer()
    ids = {
        k: tok.convert_tokens_to_ids(v)
        for k, v in {
            "image_token_id": "<|image_pad|>",
            "video_token_id": "<|video_pad|>",
            "vision_start_token_id": "<|vision_start|>",
            "vision_end_token_id": "<|vision_end|>",
        }.items()
    }
    text = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32)
    head_half = 8  # head_dim 16 -> rotary half 8
    mrope = [2, 3, 3]
    assert sum(mrope) == head_half
    torch.manual_seed(seed)
    if arch == "qwen2_5_vl":
        text["rope_parameters"] = {"rope_type": "default", "mrope_section": mrope}
        vision.update(patch_size=14, window_size=56, fullatt_block_indexes=[0])
        config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
        model = Qwen2_5_VLForConditionalGeneration(config)
    else:
        text.update(head_dim=16)
        text["rope_parameters"] = {"rope_type": "default", "mrope_section": mrope, "mrope_interleaved": True}
        vision.update(patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0])
        config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
        model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    return model.float().eval()


def image_processor(arch: str = "qwen2_5_vl") -> Qwen2VLImageProcessorPil:
    """The PIL image processor with small pixel bounds (a 56x56 image -> 4 placeholder tokens)."""
    patch = 14 if arch == "qwen2_5_vl" else 16
    return Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=64 * 64, patch_size=patch, merge_size=2)


def first_turn_length(episode) -> float:
    """A test reward with variance even for an untrained policy: length of the first turn (in 100s of chars)."""
    return len(episode.turns[0]) / 100 if episode.turns else 0.0


VARYING_REWARD = [
    "~reward.custom_reward_function.reward_kwargs.recipe_path",
    "+reward.custom_reward_function.reward_kwargs.recipe={terms:{length:{weight:1.0,"
    "reward:'tests.rl.engine_helpers:first_turn_length'}}}",
    # no outcome or format term to name: the recipe checks refuse a reward metric that names no term
    "ragym.outcome_metric=null",
    "ragym.guards.format_only.action=off",
]
"""Overrides replacing the demo's reward recipe with ``first_turn_length``."""


def reference_logprobs(model, prompt_ids: list[int], token_ids: list[int], vision: dict) -> torch.Tensor:
    """Log-probs [T] of ``token_ids`` after ``prompt_ids`` from one full Hugging Face forward: what the trainer
    computes, the reference a rollout's own log-probs are checked against."""
    from ragym.rl.core.vision import rope_positions

    ids = torch.tensor([prompt_ids + token_ids])
    positions = rope_positions(model, ids, torch.ones_like(ids), vision.get("image_grid_thw"))
    with torch.no_grad():
        logits = model(
            input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions, **vision
        ).logits
    start = len(prompt_ids) - 1
    logprobs = torch.log_softmax(logits[0, start:-1].float(), -1)  # [T, V]
    return logprobs.gather(-1, torch.tensor(token_ids)[:, None]).squeeze(-1)
