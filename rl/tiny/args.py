"""``ragym tiny-policy``'s command line and the architectures it builds, importable without torch or transformers.

``ragym``'s dispatcher parses it before ``ragym.rl.tiny.policy`` loads (transformers' model classes, about 6 s),
so ``--help`` and a usage error take a moment; ``policy.main`` parses with the same function.
"""

from __future__ import annotations

import argparse

ARCHS = ("qwen2_5_vl", "qwen3_vl")
"""Supported architectures (Hugging Face ``model_type`` of the root config)."""


def parse_tiny_policy_args(argv: list[str]) -> argparse.Namespace:
    """``ragym tiny-policy --arch ARCH --out DIR [--seed S]``."""
    parser = argparse.ArgumentParser(
        prog="ragym tiny-policy",
        description="a tiny Qwen2.5-VL / Qwen3-VL policy built from config, with a locally trained tokenizer",
    )
    parser.add_argument("--arch", choices=ARCHS, required=True, help="model architecture")
    parser.add_argument("--out", required=True, help="output model directory")
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    return parser.parse_args(argv)
