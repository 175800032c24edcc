"""The suite's per-test time limit (pyproject's ``[tool.pytest.ini_options]`` ``timeout``, pytest-timeout): a hung
test fails with the traceback of where it waits and the suite goes on, instead of holding CI until its 90-minute
limit (a wait loop in ``tests/rl/verl_plugin/test_partial_rollout.py`` once spun forever)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CI_LIMIT_S = 90 * 60
SLOWEST_TEST_S = 544
"""The slowest test on the slowest 2-core host measured (tests/launch/budget.md, seventh look)."""

HUNG = """
import time


def test_hangs():
    while True:
        time.sleep(0.05)


def test_after_it():
    assert 1 + 1 == 2
"""


def test_the_limit_is_set_well_above_the_slowest_test_and_leaves_ci_room(
    request: pytest.FixtureRequest,
) -> None:
    limit = float(request.config.getini("timeout"))
    assert limit >= 3 * SLOWEST_TEST_S, f"timeout {limit} s: a slow host's longest test would fail"
    # A hung test costs the limit on top of the rest of the suite (25-53 min measured).
    assert limit <= CI_LIMIT_S / 3, f"timeout {limit} s: a hung test would leave CI no time"
    assert request.config.getini("timeout_method") == "signal"


def test_a_hung_test_fails_where_it_waits_and_the_next_test_still_runs(tmp_path: Path) -> None:
    """As make test runs: on pytest-xdist's workers (a limit that killed the worker would lose the file's other
    tests with it)."""
    (tmp_path / "test_hung.py").write_text(HUNG)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(REPO_ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-o",
            "timeout=2",
            "-n",
            "2",
            str(tmp_path / "test_hung.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 1, log
    assert "1 failed, 1 passed" in log, log
    assert "FAILED test_hung.py::test_hangs - Failed: Timeout (>2.0s)" in log, log
    assert ">           time.sleep(0.05)" in log, log
