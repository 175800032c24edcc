"""Shared fixtures for the rl tests: tiny policies built once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ragym.rl.models import load_processor
from ragym.rl.tiny.policy import TinyPolicyConfig, build_tiny_policy

REAL_SETTINGS = {
    # arch: (processor min_pixels, max_pixels as shipped in the models' preprocessor configs, the recipe)
    "qwen2_5_vl": (56 * 56, 12_845_056, "kbvqa_qwen2_5_vl_7b"),
    "qwen3_vl": (256 * 256, 16_777_216, "kbvqa_qwen3_vl_8b"),
}
"""The real models' processor pixel ranges (their patch and merge sizes come with the tiny policy's arch)."""


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_policy_dir(arch)``: the directory of a tiny ``arch`` policy (seed 0), built on first use."""
    built: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in built:
            built[arch] = build_tiny_policy(arch, tmp_path_factory.mktemp(f"tiny_{arch}"), seed=0)
        return built[arch]

    return get


SHORT_POSITIONS = 1024 + 16
"""``max_position_embeddings`` of ``short_policy_dir``: the tiny recipe's prompt length and a 16-token response fit
exactly."""


@pytest.fixture(scope="session")
def short_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2.5-VL policy (seed 0) whose positions end at ``SHORT_POSITIONS``: longer rollouts are refused."""
    config = TinyPolicyConfig(max_position_embeddings=SHORT_POSITIONS)
    return build_tiny_policy("qwen2_5_vl", tmp_path_factory.mktemp("tiny_short"), seed=0, config=config)


@pytest.fixture(scope="session")
def real_policy(tmp_path_factory: pytest.TempPathFactory):
    """``real_policy(arch)``: (folder, processor) of a tiny policy with the real model's patch, merge and pixels."""
    built = {}

    def get(arch: str):
        if arch not in built:
            least, most, _ = REAL_SETTINGS[arch]
            config = TinyPolicyConfig(vocab_size=600, min_pixels=least, max_pixels=most)
            out = build_tiny_policy(
                arch, tmp_path_factory.mktemp(arch), corpus=["hello world"] * 4, config=config
            )
            built[arch] = (out, load_processor(out))
        return built[arch]

    return get
