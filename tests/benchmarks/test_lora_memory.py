"""benchmarks/lora_memory.py measures what it says: its step trains the image as well as the text, and under LoRA
AdamW holds moments for the adapters alone."""

from __future__ import annotations

import argparse

import torch

from benchmarks.lora_memory import child, policy_config, training_batch


def test_the_batch_holds_one_image_of_the_models_placeholder_count() -> None:
    config = policy_config("qwen2_5_vl_7b", layers=1, vocab=512)
    batch = training_batch(config, tokens=128, device="cpu")
    # 16 x 16 patches merged 2 x 2: 64 placeholders, one vision start and end, no stray vision tokens.
    assert int((batch["input_ids"] == config.image_token_id).sum()) == 16 * 16 // 4
    assert int((batch["input_ids"] == config.vision_start_token_id).sum()) == 1
    assert int((batch["input_ids"] == config.vision_end_token_id).sum()) == 1
    assert batch["pixel_values"].shape == (256, 3 * 2 * 14 * 14)
    assert int(batch["input_ids"].max()) < config.get_text_config().vocab_size


def test_a_step_counts_the_adapters_moments_only() -> None:
    args = argparse.Namespace(layers=1, vocab=512, tokens=96, device="cpu")
    full, lora = child("tiny", "full", args), child("tiny", "lora", args)
    assert full["trainable"] == full["num_params"] and full["adam_values"] == 2 * full["num_params"]
    assert 0 < lora["trainable"] < full["trainable"] / 5 and lora["adam_values"] == 2 * lora["trainable"]
    assert torch.isfinite(torch.tensor([full["loss"], lora["loss"]])).all()
