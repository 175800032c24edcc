"""``make lint``'s type check, run in ``make test``: pyright finds no error in the files the Makefile's ``TYPED``
names, which are every file of the four layers but those ``UNTYPED`` lists (docs/development.md).

One pyright run covers both lists and a probe with a type error of its own: the probe's error must be found (a
check that checks nothing cannot pass), each ``UNTYPED`` file must still have an error (a fixed one moves into
``TYPED``), and a layer file in neither list fails the test (``TYPED`` is a folder walk, so a new module is in it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("envs", "rewards", "rl", "data_prep")
PROBE = 'from ragym.envs.core import defuse\n\nnum_chars: int = defuse("<image>")\n'
"""A ``str`` where an ``int`` is declared, through a ``ragym`` import: pyright must report it."""


def lint_paths() -> tuple[list[str], list[str]]:
    """``TYPED`` and ``UNTYPED`` as the Makefile expands them (``make print-typed``)."""
    result = subprocess.run(
        ["make", "-s", "--no-print-directory", "print-typed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    typed, untyped = result.stdout.splitlines()
    return typed.split(), untyped.split()


def layer_files(path: str) -> set[str]:
    """The ``.py`` files a pyright path argument stands for, as ``ragym/<layer>/...`` paths."""
    real = REPO / Path(path).relative_to("ragym")
    files = [real] if real.is_file() else sorted(real.rglob("*.py"))
    return {f"ragym/{f.relative_to(REPO)}" for f in files}


def test_lint_checks_every_layer_file() -> None:
    """Every ``.py`` file of the layers is in ``TYPED`` or in ``UNTYPED``, never both, and each listed path exists."""
    typed, untyped = lint_paths()
    assert len(untyped) < 10, f"UNTYPED has grown to {len(untyped)} files: {untyped}"
    missing = [p for p in [*typed, *untyped] if not (REPO / p).exists()]
    assert not missing, f"the Makefile names paths that do not exist: {missing}"
    checked = set().union(*map(layer_files, typed))
    left_out = set().union(*map(layer_files, untyped))
    every = set().union(*(layer_files(f"ragym/{layer}") for layer in LAYERS))
    assert not checked & left_out, f"in TYPED and UNTYPED: {sorted(checked & left_out)}"
    assert every - checked - left_out == set(), f"in neither list: {sorted(every - checked - left_out)}"


def test_pyright_finds_no_error_in_the_typed_layers(tmp_path: Path) -> None:
    """pyright (pyproject's ``[tool.pyright]``) on ``TYPED``: no error; the probe's error found; each ``UNTYPED``
    file still with one."""
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    if pyright is None:
        pytest.skip("pyright is not installed (setup.py's dev extra installs it)")
    typed, untyped = lint_paths()
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    result = subprocess.run(
        [pyright, "--outputjson", "--project", str(REPO), *typed, *untyped, str(probe)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = json.loads(result.stdout)
    errors: dict[str, list[str]] = {}
    for d in report["generalDiagnostics"]:
        if d["severity"] == "error":
            path = Path(d["file"])
            name = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name
            errors.setdefault(name, []).append(
                f"{d['range']['start']['line'] + 1}: {d['message'].splitlines()[0]}"
            )
    probe_errors = errors.pop("probe.py", [])
    assert len(probe_errors) == 1 and "str" in probe_errors[0], probe_errors
    still_open = [p for p in untyped if p not in errors]
    assert not still_open, f"no error left in {still_open}: take them out of the Makefile's UNTYPED"
    in_typed = {name: lines for name, lines in errors.items() if name not in untyped}
    assert not in_typed, "\n".join(f"{name}:{line}" for name, lines in in_typed.items() for line in lines)
