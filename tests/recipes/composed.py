"""Snapshots of every shipped training recipe as Hydra composes it, alone and under each platform's overrides.

The recipes compose from shared bases (``recipes/base/``); a change to a base reaches every recipe built on it.
``tests/recipes/test_composed.py`` composes each recipe and compares it with its snapshot in
``tests/recipes/composed/``, so a refactor of the recipes that changes what any of them composes to fails there.
The snapshots were first written from the recipes as whole copies (before the bases), so equality shows the bases
changed nothing. Regenerate after an intended change, and read the diff::

    .venv/bin/python -m tests.recipes.composed --update
    .venv/bin/python -m tests.recipes.composed --update --rev HEAD   # from a commit's recipes/
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ragym.rl.recipe.compose import RECIPES_DIR, compose_recipe
from ragym.rl.recipe.platforms import merge_overrides, platform_overrides

logger = logging.getLogger(__name__)

SNAPSHOTS_DIR = Path(__file__).resolve().parent / "composed"
"""One JSON file per shipped training recipe."""
NOT_TRAINING_RECIPES = ("rewards", "retriever", "agent_loops", "platforms", "base")
"""Sub-folders of ``recipes/`` whose YAML is not a training recipe of its own."""
PLATFORM_SETS = {"cpu+toy": ("cpu", "toy")}
"""Platform files applied together as ``ragym train --engine verl --toy DIR`` applies them on a CPU, each
snapshot as what it changes in the recipe (Hydra applies overrides to the composed config, so one set shows
that a recipe takes them as before; each set costs a composition per recipe, about a second)."""
ABSENT = "<absent>"
"""A key that the platform's overrides removed (written in place of its value)."""


def training_recipes(recipes_dir: Path = RECIPES_DIR) -> list[Path]:
    """The training recipes under ``recipes_dir`` (not the bases, reward recipes or platform files)."""
    return sorted(
        path
        for path in recipes_dir.rglob("*.yaml")
        if path.relative_to(recipes_dir).parts[0] not in NOT_TRAINING_RECIPES
    )


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a plain container; an empty mapping is a leaf.

    >>> dict(leaves({"a": {"b": 1, "c": {}}, "d": [1]}))
    {'a.b': 1, 'a.c': {}, 'd': [1]}
    """
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), node


def composed(path: Path, platforms: tuple[str, ...] = ()) -> dict[str, Any] | str:
    """``path`` composed with the platforms' overrides, interpolations unresolved; the error's text if it fails."""
    overrides = merge_overrides(*(platform_overrides(name) for name in platforms))
    try:
        config = compose_recipe(path, overrides)
    except Exception as err:  # noqa: BLE001 - a refusal is part of what the recipe composes to
        return f"{type(err).__name__}: {err}".replace(str(path.parent), "<recipes>")
    container = OmegaConf.to_container(config, resolve=False)
    assert isinstance(container, dict)
    return {str(key): value for key, value in container.items()}


def change(plain: dict[str, Any], other: dict[str, Any] | str) -> dict[str, Any] | str:
    """The leaves of ``other`` that differ from ``plain`` (removed ones as ``ABSENT``)."""
    if isinstance(other, str):
        return other
    before, after = dict(leaves(plain)), dict(leaves(other))
    changed = {key: value for key, value in after.items() if before.get(key, ABSENT) != value}
    changed.update({key: ABSENT for key in before if key not in after})
    return dict(sorted(changed.items()))


def snapshot(path: Path) -> dict[str, Any]:
    """The recipe composed alone, and what each platform set changes in it."""
    plain = composed(path)
    if isinstance(plain, str):
        raise ValueError(f"{path.name} does not compose: {plain}")
    platforms = {name: change(plain, composed(path, files)) for name, files in PLATFORM_SETS.items()}
    return {"recipe": plain, "platforms": platforms}


def snapshots(recipes_dir: Path = RECIPES_DIR) -> dict[str, dict[str, Any]]:
    """Recipe name (its path under ``recipes_dir``, without ``.yaml``) -> its snapshot."""
    return {
        str(path.relative_to(recipes_dir).with_suffix("")): snapshot(path)
        for path in training_recipes(recipes_dir)
    }


def snapshots_at(rev: str) -> dict[str, dict[str, Any]]:
    """Snapshots of ``recipes/`` as commit ``rev`` holds it (extracted to a temporary folder)."""
    repo = RECIPES_DIR.parent
    archive = subprocess.run(
        ["git", "archive", rev, "recipes"], cwd=repo, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        return snapshots(Path(tmp) / "recipes")


def snapshot_path(name: str) -> Path:
    """Where recipe ``name``'s snapshot is committed."""
    return SNAPSHOTS_DIR / f"{name.replace('/', '__')}.json"


def write(found: dict[str, dict[str, Any]]) -> None:
    """Replace the committed snapshots with ``found`` (stale files removed)."""
    SNAPSHOTS_DIR.mkdir(exist_ok=True)
    for stale in SNAPSHOTS_DIR.glob("*.json"):
        stale.unlink()
    for name, data in found.items():
        snapshot_path(name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        logger.info("wrote %s", snapshot_path(name))


def _committed(name: str) -> dict[str, Any] | None:
    """Recipe ``name``'s committed snapshot (None if there is none)."""
    path = snapshot_path(name)
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    """Compare the recipes with their snapshots, or (``--update``) rewrite the snapshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite tests/recipes/composed/")
    parser.add_argument(
        "--rev", help="compose recipes/ as this git revision holds it (default: the work tree)"
    )
    args = parser.parse_args(argv)
    found = snapshots_at(args.rev) if args.rev else snapshots()
    if args.update:
        write(found)
        return 0
    differ = [name for name, data in found.items() if _committed(name) != data]
    for name in differ:
        logger.error("%s composes differently from %s", name, snapshot_path(name))
    return 1 if differ else 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main())
