"""Every doctest of ragym's four layers runs in the suite, one test per module, so a failure names its module: a
module's examples are documentation a user copies, and an example nobody runs goes stale unseen."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ragym"
LAYERS = ("rl", "envs", "rewards", "data_prep")
"""The layers under ``ragym`` (each a link to the top-level folder of that name)."""


def doctested_modules() -> list[str]:
    """Dotted names (``ragym.rl.off_policy``) of the layers' modules whose source holds a ``>>>`` example."""
    names = []
    for layer in LAYERS:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                parts = path.relative_to(PACKAGE).with_suffix("").parts
                names.append(".".join(("ragym", *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return names


MODULES = doctested_modules()


def test_every_layer_has_doctested_modules() -> None:
    """The search found the layers (an empty list would run no doctest and pass)."""
    assert {name.split(".")[1] for name in MODULES} == set(LAYERS)
    assert "ragym.rl.off_policy" in MODULES and "ragym.rewards.kbvqa" in MODULES


@pytest.mark.parametrize("module_name", MODULES)
def test_doctests(module_name: str) -> None:
    result = doctest.testmod(importlib.import_module(module_name), optionflags=doctest.ELLIPSIS)
    # A ">>>" doctest does not collect (in a comment, a nested function) is an example that never runs.
    assert result.attempted > 0, f"{module_name} holds '>>>' but doctest finds no example in it"
    assert result.failed == 0, f"{module_name}: {result.failed} of {result.attempted} examples failed (above)"
