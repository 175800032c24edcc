"""Fixtures for env tests: one tiny synthetic KB per session (built in well under a second)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ragym.data_prep.synthetic_kb import PRESETS, build_kb


@pytest.fixture(scope="session")
def tiny_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 60-entity KB with single-image and comparison questions."""
    out = tmp_path_factory.mktemp("kb") / "tiny"
    return build_kb(out, replace(PRESETS["tiny"], num_rows=60, comparison_fraction=0.3), seed=3)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Built-in KBs (gymnasium.make with no arguments) go to a per-session folder, not ~/.cache."""
    import os

    os.environ["RAGYM_CACHE"] = str(tmp_path_factory.mktemp("ragym_cache"))


@pytest.fixture(scope="session")
def r3g_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic R3G task: 12 classes of 5 look-alike images, one showing the cue."""
    from ragym.data_prep.r3g_synthetic import Preset, build_task

    return build_task(tmp_path_factory.mktemp("r3g") / "task", Preset(num_classes=12), seed=1)
