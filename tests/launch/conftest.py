"""What the verl trainer tests share: one toy folder for the session, so each env's rows and warm-started
policy are built once for the hf and the vLLM rollout's runs alike (a warm start is most of a run's time)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragym.rl.verl_plugin.verl_local import private_network_refusal


@pytest.fixture(scope="session")
def toy() -> Iterator[Path]:
    """The session's toy folder (``ragym train --engine verl --toy``), inside a private network namespace."""
    refusal = private_network_refusal()
    if refusal:
        pytest.skip(refusal)
    path = Path(tempfile.mkdtemp(prefix="ragym-verl-"))  # short: Ray's socket paths stay under 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)
