"""Keys a demo sets itself (its seeds, the R3G expert's protocol share) are refused in one line when a recipe or an
override sets them, before anything is built (they crashed with a TypeError after the KB and policy were built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import SET_BY_RUN, unknown_keys


def test_the_recipe_check_names_every_key_the_run_sets() -> None:
    overrides = [f"+{key}=3" for key in SET_BY_RUN]
    assert unknown_keys("kbvqa_tiny_cpu", overrides) == list(SET_BY_RUN)
    assert (
        unknown_keys("kbvqa_tiny_cpu", ["ragym.demo.warm_start.epochs=2"]) == []
    )  # its neighbours are knobs


def test_the_demo_refuses_a_seed_in_the_recipe_before_building_anything(tmp_path: Path) -> None:
    from ragym.rl.demo.run import prepare

    with pytest.raises(
        UsageError, match=r"ragym.demo.warm_start.seed is set by the run's --seed, not by the recipe"
    ):
        prepare(tmp_path, 0, 1, extra_overrides=["+ragym.demo.warm_start.seed=3"])
    assert not (tmp_path / "kb").exists() and not (tmp_path / "tiny_policy").exists()


def test_the_r3g_demo_refuses_its_protocol_share_before_building_anything(tmp_path: Path) -> None:
    from ragym.rl.demo.r3g import run

    with pytest.raises(UsageError, match=r"protocol_share is set by the R3G task"):
        run(tmp_path, 0, 1, ["+ragym.r3g_demo.warm_start.protocol_share=0.5"])
    assert not (tmp_path / "task").exists()


def test_the_demo_refuses_a_bad_cotrain_setting_before_building_anything(tmp_path: Path) -> None:
    # ``ragym ablate cotrain`` runs its grid through prepare: the trainer reads the section only after the warm start.
    from ragym.rl.demo.run import prepare

    with pytest.raises(UsageError, match=r"ragym.cotrain: lr and scale must be > 0"):
        prepare(tmp_path, 0, 1, extra_overrides=["+ragym.cotrain.lr=-1"])
    assert not (tmp_path / "kb").exists() and not (tmp_path / "tiny_policy").exists()
