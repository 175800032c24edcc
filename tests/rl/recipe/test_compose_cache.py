"""``compose_recipe`` keeps the compositions a process made: the same recipe and overrides give a copy of the kept
one, and an edit of any file the composition may read composes afresh."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ragym.rl.recipe import compose
from ragym.rl.recipe.compose import RECIPES_DIR, compose_recipe, sources_stamp

RECIPE = """\
hydra:
  searchpath:
    - pkg://verl.trainer.config
    - file://{bases}
defaults:
  - ppo_trainer
  - mine/base
  - _self_
data:
  train_batch_size: 8
"""


@pytest.fixture
def user_recipe(tmp_path: Path) -> Path:
    """A recipe outside ``recipes/`` whose base sits in a ``file://`` search-path folder of its own."""
    bases = tmp_path / "bases"
    (bases / "mine").mkdir(parents=True)
    (bases / "mine" / "base.yaml").write_text("# @package _global_\ntrainer:\n  total_epochs: 3\n")
    (tmp_path / "recipes").mkdir()
    recipe = tmp_path / "recipes" / "mine.yaml"
    recipe.write_text(RECIPE.format(bases=bases))
    return recipe


def _epochs(recipe: Path, overrides: list[str] | None = None) -> int:
    return compose_recipe(recipe, overrides).trainer.total_epochs


def test_a_kept_composition_is_a_copy_and_equals_a_fresh_one(user_recipe: Path) -> None:
    first = compose_recipe(user_recipe, ["trainer.total_training_steps=5"])
    first.data.train_batch_size = 99  # the caller's copy: the next composition does not see it
    again = compose_recipe(user_recipe, ["trainer.total_training_steps=5"])
    assert again.data.train_batch_size == 8 and again.trainer.total_training_steps == 5
    fresh = compose._compose(user_recipe, ["trainer.total_training_steps=5"])
    assert OmegaConf.to_container(again, resolve=False) == OmegaConf.to_container(fresh, resolve=False)
    assert OmegaConf.is_struct(again) == OmegaConf.is_struct(fresh)  # a misspelt key still fails on access
    assert _epochs(user_recipe) == 3  # other overrides: their own composition


def test_an_edited_recipe_or_base_composes_afresh(user_recipe: Path) -> None:
    assert _epochs(user_recipe) == 3
    base = user_recipe.parents[1] / "bases" / "mine" / "base.yaml"
    base.write_text(
        "# @package _global_\ntrainer:\n  total_epochs: 7\n"
    )  # a base in a file:// search-path folder
    assert _epochs(user_recipe) == 7
    written = user_recipe.read_text()
    user_recipe.write_text(written + "trainer:\n  total_epochs: 11\n")  # the recipe itself
    assert _epochs(user_recipe) == 11
    user_recipe.write_text(written)
    assert _epochs(user_recipe) == 7
    # An edit that keeps the size, its modification time set back a nanosecond: still a new stamp.
    stat = base.stat()
    base.write_text("# @package _global_\ntrainer:\n  total_epochs: 8\n")
    os.utime(base, ns=(stat.st_atime_ns, stat.st_mtime_ns - 1))
    assert _epochs(user_recipe) == 8


def test_a_new_file_in_a_config_group_folder_changes_the_stamp(user_recipe: Path) -> None:
    before = sources_stamp(user_recipe)
    (user_recipe.parents[1] / "bases" / "mine" / "other.yaml").write_text("a: 1\n")
    assert sources_stamp(user_recipe) != before
    # ... and a shipped recipe's stamp covers its bases and platforms.
    shipped = {
        Path(file).relative_to(RECIPES_DIR).as_posix()
        for file, _, _ in sources_stamp(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml") or ()
    }
    assert {"kbvqa_qwen2_5_vl_7b.yaml", "base/kbvqa.yaml", "platforms/cpu.yaml"} <= shipped


def test_a_recipe_in_a_large_folder_is_composed_every_time(
    user_recipe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compose, "STAMP_MAX_ENTRIES", 2)
    assert sources_stamp(user_recipe) is None
    calls = []
    real = compose._compose
    monkeypatch.setattr(compose, "_compose", lambda *a: calls.append(a) or real(*a))
    assert _epochs(user_recipe) == _epochs(user_recipe) == 3
    assert len(calls) == 2


def test_at_most_the_kept_number_of_compositions_is_held(
    user_recipe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compose, "COMPOSITIONS_KEPT", 2)
    for steps in range(4):
        compose_recipe(user_recipe, [f"trainer.total_training_steps={steps + 1}"])
    assert len(compose._compositions) <= 2
    kept = [key[1] for key in compose._compositions]
    assert ("trainer.total_training_steps=4",) in kept and ("trainer.total_training_steps=1",) not in kept
