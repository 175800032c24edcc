"""What the verl trainer tests share: the session's toy folder (``tests/conftest.py`` ``TOY_ENV``), so each env's
rows and warm-started policy are built once for the hf and the vLLM rollout's runs alike, on both xdist workers
(a warm start is most of a run's time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragym.rl.verl_plugin.verl_local import private_network_refusal
from tests.conftest import TOY_ENV


@pytest.fixture(scope="session")
def toy() -> Path:
    """The session's toy folder (``ragym train --engine verl --toy``), inside a private network namespace."""
    refusal = private_network_refusal()
    if refusal:
        pytest.skip(refusal)
    return Path(os.environ[TOY_ENV])
