"""Tiny Qwen2.5-VL / Qwen3-VL policies built from config, with a locally trained tokenizer.

They are real ``Qwen2_5_VLForConditionalGeneration`` / ``Qwen3VLForConditionalGeneration`` models of
about a million parameters, saved in Hugging Face format with a tokenizer, a processor (PIL image
processor, no video processor) and ragym's own Qwen-style chat template, so ``ragym.rl.models.load_policy``
loads them exactly like Qwen2.5-VL-7B. They exist for the CPU demo, the tests and debugging.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

from ragym.envs.kbvqa.actions import ACTION_TAGS, REASON_TAG
from ragym.rl.agent_loop.chat_template import CHAT_TEMPLATE
from ragym.rl.models import make_processor
from ragym.rl.tiny.args import ARCHS, parse_tiny_policy_args

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
"""Qwen's special tokens, in Qwen's order (the ids differ: the vocabulary is ours)."""


GRAMMAR_TOKENS = tuple(f"<{close}{tag}>" for tag in (REASON_TAG, *ACTION_TAGS) for close in ("", "/"))
"""The KB-VQA action tags, from the env's own grammar (``envs/kbvqa/actions.py``)."""


@dataclass(frozen=True)
class TinyPolicyConfig:
    """Sizes of a tiny policy; the defaults give roughly a million parameters."""

    vocab_size: int = 2048
    """BPE vocabulary size including the byte alphabet and the special tokens."""
    hidden_size: int = 128
    """Language model width."""
    num_layers: int = 2
    """Language model decoder layers."""
    num_heads: int = 4
    """Attention heads (head dim = hidden_size / num_heads; M-RoPE sections split half of it)."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention, as in Qwen)."""
    intermediate_size: int = 256
    """Language model MLP width."""
    vision_hidden_size: int = 32
    """Vision tower width."""
    vision_depth: int = 2
    """Vision tower blocks."""
    vision_heads: int = 2
    """Vision tower attention heads."""
    min_pixels: int = 32 * 32
    """Smallest image area after resizing (processor ``min_pixels``)."""
    max_pixels: int = 128 * 128
    """Largest image area after resizing: a 64x64 image becomes 4 placeholder tokens."""
    max_position_embeddings: int = 8192
    """Longest sequence the rotary embedding is configured for."""
    grammar_tokens: tuple[str, ...] = GRAMMAR_TOKENS
    """Action tags added as whole (non-special) tokens, as Qwen3 adds ``<think>``: one token per tag."""
    extra_tokens: tuple[str, ...] = ()
    """Further whole tokens (the CPU demo adds its KB's signature codes, so each code is one token)."""


def _mrope_section(head_dim: int) -> list[int]:
    """Split half the head dim into (temporal, height, width) rotary sections like Qwen's 16/24/24."""
    half = head_dim // 2
    temporal = half // 4
    height = (half - temporal) // 2
    return [temporal, height, half - temporal - height]


def default_corpus() -> Iterator[str]:
    """Text covering the chat scaffold and the env grammars: built-in lines, plus KBVQA-v0 text when registered."""
    from ragym.rl.tiny.corpus import builtin_corpus, env_corpus

    yield from builtin_corpus()
    yield from env_corpus()


def train_tokenizer(
    corpus: Iterable[str], vocab_size: int, grammar_tokens: tuple[str, ...] = GRAMMAR_TOKENS
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` with Qwen's special tokens and chat template."""
    tokenizer = Tokenizer(models.BPE())
    # Byte-level keeps every string encodable (no unknown token) and "\n" a single token, which verl's
    # Qwen continuous-token builder requires.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    # Not special: decoding with skip_special_tokens keeps them, so the env still reads the tags.
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in grammar_tokens])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[3:]),
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(arch: str, cfg: TinyPolicyConfig, tokenizer: PreTrainedTokenizerFast):
    """The root config of ``arch`` at ``cfg``'s sizes, with the special-token ids of ``tokenizer``."""
    # One token each, so one id each (convert_tokens_to_ids's type also covers a list of tokens).
    ids: dict[str, Any] = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in _TOKEN_FIELDS.items()}
    head_dim = cfg.hidden_size // cfg.num_heads
    text: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=ids["eos_token_id"],
        eos_token_id=ids["eos_token_id"],
        pad_token_id=ids["pad_token_id"],
    )
    vision: dict[str, Any] = dict(
        depth=cfg.vision_depth,
        hidden_size=cfg.vision_hidden_size,
        intermediate_size=2 * cfg.vision_hidden_size,
        num_heads=cfg.vision_heads,
        out_hidden_size=cfg.hidden_size,
    )
    tokens = {k: v for k, v in ids.items() if k not in {"eos_token_id", "pad_token_id"}}
    if arch == "qwen2_5_vl":
        text["rope_parameters"] = {"rope_type": "default", "mrope_section": _mrope_section(head_dim)}
        vision.update(patch_size=14, window_size=56, fullatt_block_indexes=[cfg.vision_depth - 1])
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **tokens)
    text.update(head_dim=head_dim)
    text["rope_parameters"] = {
        "rope_type": "default",
        "mrope_section": _mrope_section(head_dim),
        "mrope_interleaved": True,
    }
    # Learned 2-D position grid of the Qwen3 vision tower: 8x8, interpolated to the image grid.
    vision.update(patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[cfg.vision_depth - 1])
    return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **tokens)


_TOKEN_FIELDS = {
    "eos_token_id": "<|im_end|>",
    "pad_token_id": "<|endoftext|>",
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}


def _processor(arch: str, cfg: TinyPolicyConfig, tokenizer: PreTrainedTokenizerFast):
    """A Qwen processor with the PIL image processor (no torchvision here) and no video processor."""
    patch_size = 14 if arch == "qwen2_5_vl" else 16
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=cfg.min_pixels, max_pixels=cfg.max_pixels, patch_size=patch_size, merge_size=2
    )
    return make_processor(arch, image_processor, tokenizer, CHAT_TEMPLATE)


def build_tiny_policy(
    arch: str,
    out_dir: str | Path,
    corpus: Iterable[str] | None = None,
    seed: int = 0,
    config: TinyPolicyConfig = TinyPolicyConfig(),
) -> Path:
    """Build, randomly initialise (seeded) and save a tiny ``arch`` policy in ``out_dir``; returns the path."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {ARCHS}")
    out = Path(out_dir)
    tokenizer = train_tokenizer(
        default_corpus() if corpus is None else corpus,
        config.vocab_size,
        config.grammar_tokens + config.extra_tokens,
    )
    root_config = model_config(arch, config, tokenizer)
    torch.manual_seed(seed)
    cls = Qwen2_5_VLForConditionalGeneration if arch == "qwen2_5_vl" else Qwen3VLForConditionalGeneration
    # transformers wraps ``to`` in functools.wraps(nn.Module.to), which pyright reads as the unbound method.
    model = cls(root_config).to(torch.float32)  # pyright: ignore[reportArgumentType]
    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _processor(arch, config, tokenizer).save_pretrained(out)
    num_params = sum(p.numel() for p in model.parameters())
    logger.info("tiny %s policy: %d parameters, vocab %d -> %s", arch, num_params, len(tokenizer), out)
    return out


def main(argv: list[str]) -> int:
    """``ragym tiny-policy --arch ARCH --out DIR [--seed S]``."""
    args = parse_tiny_policy_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        from ragym.rl.errors import UsageError

        # Never overwrite a folder: it may hold trained weights (and their optimizer state beside them).
        raise UsageError(f"--out {out} exists and is not empty; give a new or empty folder")
    path = build_tiny_policy(args.arch, out, seed=args.seed)
    print(path)
    return 0
