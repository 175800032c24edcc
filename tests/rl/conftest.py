"""Shared fixtures for the rl tests: tiny policies built once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rl.tiny.policy import build_tiny_policy


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_policy_dir(arch)``: the directory of a tiny ``arch`` policy (seed 0), built on first use."""
    built: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in built:
            built[arch] = build_tiny_policy(arch, tmp_path_factory.mktemp(f"tiny_{arch}"), seed=0)
        return built[arch]

    return get
