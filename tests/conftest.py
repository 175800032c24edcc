"""Shared pytest setup: offline hubs, deterministic seeds, paths to shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# No hub is reachable here or in CI: fail fast instead of hanging on a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A retrieval service named by the developer's shell would reroute every KBVQA-v0 env under test.
os.environ.pop("RAGYM_RETRIEVAL_URL", None)
os.environ.pop("RAGYM_RETRIEVAL_TOKEN", None)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The shared real-data folder; tests using it skip with a reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA
