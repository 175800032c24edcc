"""Tiny policies: built from config, saved in HF format, loaded by the same loader as the 7B models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from ragym.rl.models import load_policy
from ragym.rl.tiny.policy import ARCHS, GRAMMAR_TOKENS, SPECIAL_TOKENS, build_tiny_policy, main

MERGE = 2  # both tiny processors merge 2x2 patches into one placeholder token


def _image(seed: int, size: tuple[int, int]) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8))


def _inputs(processor, images: list[Image.Image]):
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": "Which entity is this?"}]
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": content}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return processor(text=[text], images=images, return_tensors="pt")


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_backward_generate_with_images(arch, tiny_policy_dir):
    model, tokenizer, processor = load_policy(tiny_policy_dir(arch))
    assert model.config.model_type == arch
    images = [_image(0, (64, 64)), _image(1, (48, 96))]
    inputs = _inputs(processor, images)
    num_pads = int((inputs["input_ids"] == tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum())
    assert num_pads == int(inputs["image_grid_thw"].prod(dim=1).sum()) // MERGE**2
    assert int(inputs["image_grid_thw"][0].prod()) // MERGE**2 <= 16  # a 64x64 image is a handful of tokens

    out = model(**inputs, labels=inputs["input_ids"])
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.model.visual.parameters())

    generated = model.generate(**inputs, max_new_tokens=6, do_sample=True)
    assert generated.shape[1] > inputs["input_ids"].shape[1]


@pytest.mark.parametrize("arch", ARCHS)
def test_saved_directory_is_a_standard_hf_model(arch, tiny_policy_dir):
    path = tiny_policy_dir(arch)
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "processor_config.json",
        "generation_config.json",
    ):
        assert (path / name).is_file(), name
    config = json.loads((path / "config.json").read_text())
    num_params = sum(t.numel() for t in load_file(path / "model.safetensors").values())
    assert config["model_type"] == arch
    assert 1e5 < num_params < 3e6
    processor_config = json.loads((path / "processor_config.json").read_text())
    assert processor_config["processor_class"] in {"Qwen2_5_VLProcessor", "Qwen3VLProcessor"}


@pytest.mark.parametrize("arch", ARCHS)
def test_tokenizer_and_template(arch, tiny_policy_dir):
    _, tokenizer, processor = load_policy(tiny_policy_dir(arch))
    for token in SPECIAL_TOKENS:
        assert tokenizer.convert_tokens_to_ids(token) != tokenizer.unk_token_id
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1
    assert len(tokenizer.encode("\n", add_special_tokens=False)) == 1  # verl's Qwen builder requires it
    for token in GRAMMAR_TOKENS:  # action tags are whole tokens that decoding for the env keeps
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1
    text = "<reason>candidate 2 looks right</reason><rerank>Entity 12</rerank> ünïcode ✓"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True) == text
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": [{"type": "text", "text": "r"}, {"type": "image"}]},
    ]
    rendered = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>q<|im_end|>\n"
        "<|im_start|>assistant\na<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nr<|vision_start|><|image_pad|><|vision_end|>\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_cli_builds_deterministically_and_corpus_shapes_vocab(tmp_path):
    assert main(["--arch", "qwen3_vl", "--out", str(tmp_path / "a"), "--seed", "3"]) == 0
    build_tiny_policy("qwen3_vl", tmp_path / "b", seed=3)
    build_tiny_policy("qwen3_vl", tmp_path / "c", seed=4)
    a, b, c = (load_file(tmp_path / d / "model.safetensors") for d in "abc")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)

    corpus = ["zebra crossing " * 3] * 50
    build_tiny_policy("qwen2_5_vl", tmp_path / "z", corpus=corpus)
    _, tokenizer, _ = load_policy(tmp_path / "z")
    assert len(tokenizer.encode("zebra crossing", add_special_tokens=False)) <= 2


def test_unknown_arch_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown arch"):
        build_tiny_policy("llama", tmp_path)


def test_cli_refuses_a_non_empty_folder(tmp_path):
    from ragym.rl.errors import UsageError

    (tmp_path / "trained").mkdir()
    (tmp_path / "trained" / "optimizer.pt").write_bytes(b"state")
    with pytest.raises(UsageError, match="not empty"):
        main(["--arch", "qwen2_5_vl", "--out", str(tmp_path / "trained")])
    assert sorted(p.name for p in (tmp_path / "trained").iterdir()) == ["optimizer.pt"]
