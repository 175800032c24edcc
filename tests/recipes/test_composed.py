"""Every shipped recipe composes to its committed snapshot (``tests/recipes/composed.py``; issue #50 item 2).

The snapshots were written from the recipes as whole copies, before they composed from ``recipes/base/``: equality
shows that the bases changed no recipe, alone or under the CPU toy's platform files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.rl.recipe.compose import RECIPES_DIR
from tests.recipes.composed import SNAPSHOTS_DIR, change, composed, snapshot_path, training_recipes

RECIPES = training_recipes()


def _name(path: Path) -> str:
    return str(path.relative_to(RECIPES_DIR).with_suffix(""))


@pytest.mark.parametrize("path", RECIPES, ids=_name)
def test_recipe_composes_to_its_snapshot(path: Path) -> None:
    committed = json.loads(snapshot_path(_name(path)).read_text())
    recipe = composed(path)
    assert isinstance(recipe, dict), recipe
    # Leaf by leaf first, so that a failure names the keys that differ.
    assert change(committed["recipe"], recipe) == {}
    assert recipe == committed["recipe"]
    for name, expected in committed["platforms"].items():
        files = tuple(name.split("+"))
        assert change(recipe, composed(path, files)) == expected, name


def test_every_snapshot_is_a_shipped_recipe() -> None:
    """A recipe renamed or removed leaves no snapshot behind that nothing compares."""
    assert sorted(path.stem for path in SNAPSHOTS_DIR.glob("*.json")) == sorted(
        snapshot_path(_name(path)).stem for path in RECIPES
    )
