"""The formatter owns the code: ``ruff format`` leaves every file as it is, and a ``# fmt: skip`` (kept only where a
table reads better aligned by hand) says why on the comment line above its statement."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = "# fmt: skip"


def python_files() -> list[Path]:
    """The repository's tracked Python files (what ``ruff`` formats)."""
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / name for name in listed.stdout.split() if (REPO / name).is_file()]


def unexplained_skips(source: str) -> list[int]:
    """Lines ending in ``# fmt: skip`` whose statement has no comment line right above it.

    >>> unexplained_skips("x = [1,  2]  # fmt: skip\\n")
    [1]
    >>> unexplained_skips("# A table: columns aligned by hand.\\nx = [\\n  1,  2,\\n]  # fmt: skip\\n")
    []
    """
    lines = source.splitlines()
    starts = {
        node.end_lineno: node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.stmt)
    }
    bad = []
    for number, line in enumerate(lines, 1):
        if line.rstrip().endswith(SKIP):
            first = min((start for end, start in starts.items() if end == number), default=number)
            above = lines[first - 2].strip() if first > 1 else ""
            if not above.startswith("#"):
                bad.append(number)
    return bad


def test_every_fmt_skip_says_why() -> None:
    found = {
        str(path.relative_to(REPO)): bad
        for path in python_files()
        if (bad := unexplained_skips(path.read_text()))
    }
    assert not found, f"'# fmt: skip' without a reason on the comment line above its statement: {found}"


def test_ruff_format_leaves_every_file_as_it_is() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
