"""``section_type_problems``: a ragym setting of the wrong type is one line before a run starts, every shipped
recipe, demo task and grid variant is clean, and ``ragym demo`` refuses a mistyped value in that line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.rl.ablate.grids import GRIDS, grid_for_task
from ragym.rl.demo import run
from ragym.rl.demo.tasks import DEMO_TASKS, task_overrides
from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import check_recipe, reward_metric_problems, section_type_problems
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.train import build_trainer

RECIPES = sorted(p.stem for p in (Path(__file__).resolve().parents[3] / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_shipped_recipe_is_well_typed(recipe: str) -> None:
    config = load_recipe(recipe)
    assert section_type_problems(config) == []
    assert reward_metric_problems(config) == []


def test_every_demo_task_and_grid_variant_is_well_typed() -> None:
    for task in DEMO_TASKS:
        config = load_recipe(run.DEMO_RECIPE, task_overrides(task))
        assert section_type_problems(config) + reward_metric_problems(config) == [], task
    for name, grid in GRIDS.items():
        if grid.kind != "kbvqa":
            continue
        for variant in grid_for_task(grid, "answer").variants:
            config = load_recipe(run.DEMO_RECIPE, list(variant.overrides))
            assert section_type_problems(config) + reward_metric_problems(config) == [], (name, variant.name)


def test_a_value_of_the_wrong_type_is_one_line_naming_the_key() -> None:
    bad = [
        "ragym.demo.copy_pretrain.until_loss=abc",
        "++ragym.demo.copy_pretrain.lr=abc",
        "ragym.demo.warm_start.epochs=2.5",
        "ragym.demo.warm_start.quote=3",
    ]
    assert sorted(section_type_problems(load_recipe(run.DEMO_RECIPE, bad))) == [
        "ragym.demo.copy_pretrain.lr: 'abc' is not a number",
        "ragym.demo.copy_pretrain.until_loss: 'abc' is not a number or null",
        "ragym.demo.warm_start.epochs: 2.5 is not an integer",
        "ragym.demo.warm_start.quote: 3 is not true or false",
    ]
    # an integer where a number goes, null where None is allowed: fine
    good = ["++ragym.demo.copy_pretrain.lr=1", "ragym.demo.copy_pretrain.until_loss=null"]
    assert section_type_problems(load_recipe(run.DEMO_RECIPE, good)) == []


def test_a_ragym_key_outside_the_sections_is_checked_too() -> None:
    """``ragym.outcome_metric=5`` went through (it is only read for a warning), and ``step_weight=abc`` failed only
    when turn credit read it, after the model had loaded."""
    bad = ["ragym.outcome_metric=5", "++ragym.turn_credit.step_weight=abc"]
    assert section_type_problems(load_recipe(run.DEMO_RECIPE, bad)) == [
        "ragym.outcome_metric: 5 is not a string or null",
        "ragym.turn_credit.step_weight: 'abc' is not a number",
    ]
    assert section_type_problems(load_recipe(run.DEMO_RECIPE, ["ragym.outcome_metric=outcome"])) == [
        "ragym.outcome_metric: 'outcome' is not a reward term's metric; name one as reward/<term>"
    ]
    assert section_type_problems(load_recipe(run.DEMO_RECIPE, ["++ragym.turn_credit.step_weight=null"])) == [
        "ragym.turn_credit.step_weight: None is not a number"
    ]
    good = ["ragym.outcome_metric=null", "++ragym.turn_credit.step_weight=2"]
    assert section_type_problems(load_recipe(run.DEMO_RECIPE, good)) == []


def test_ragym_demo_refuses_a_mistyped_setting_before_it_builds_anything(tmp_path: Path) -> None:
    with pytest.raises(
        UsageError, match=r"^ragym.demo.copy_pretrain.until_loss: 'abc' is not a number or null$"
    ):
        run.prepare(tmp_path / "demo", seed=0, extra_overrides=["ragym.demo.copy_pretrain.until_loss=abc"])
    assert not (tmp_path / "demo" / "tiny_policy").exists()


def test_ragym_train_refuses_a_mistyped_setting_before_it_reads_rows(tmp_path: Path) -> None:
    # Unchecked, the local engine ran with a guard's ``above`` of "no", a true value: it fired on the wrong side.
    with pytest.raises(UsageError, match=r"ragym.guards.entropy_floor.above: 'no' is not true or false$"):
        build_trainer(
            "kbvqa_tiny_cpu", ["ragym.guards.entropy_floor.above=no", f"trainer.default_local_dir={tmp_path}"]
        )


def test_ragym_train_refuses_a_mistyped_ragym_key_before_it_reads_rows(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"ragym.turn_credit.step_weight: 'abc' is not a number$"):
        build_trainer(
            "kbvqa_tiny_cpu",
            [
                "algorithm.adv_estimator=turn_credit",
                "++ragym.turn_credit.step_weight=abc",
                f"trainer.default_local_dir={tmp_path}",
            ],
        )


MISSPELT = [
    "ragym.outcome_metric=reward/outcom",
    "ragym.guards.format_only.action=warn",
    "ragym.guards.format_only.format_metric=reward/formt",
    "algorithm.filter_groups.enable=true",
    "algorithm.filter_groups.metric=reward/outcome_",
]
"""A reward metric misspelt in each place one is named; each was accepted, and the guard then waited for a metric no
step logs (one warning, never judged) while the filter's key failed only at the first step."""


def test_a_reward_metric_that_names_no_term_of_the_rubric_is_one_line_each() -> None:
    terms = "its terms: outcome, format, verification, retrieval_recall_at_15"
    assert reward_metric_problems(load_recipe("kbvqa_tiny_cpu", MISSPELT)) == [
        f"ragym.outcome_metric: 'reward/outcom' names no term of the reward recipe ({terms}); no step logs it; name one "
        "of them (or null)",
        f"ragym.guards.format_only.format_metric: 'reward/formt' names no term of the reward recipe ({terms}); "
        "no step logs it; name one of them or set the guard's action to off",
        f"algorithm.filter_groups.metric: 'reward/outcome_' names no term of the reward recipe ({terms}); "
        "no step logs it; name one of them",
    ]
    # held-out names are checked too; a guard that is off, a filter that is off and non-reward metrics are not
    held_out = ["ragym.guards.val_ident_floor.metric=val/reward/outcme"]
    assert [p.split(":")[0] for p in reward_metric_problems(load_recipe("kbvqa_tiny_cpu", held_out))] == [
        "ragym.guards.val_ident_floor.metric"
    ]
    off = ["ragym.guards.format_only.action=off", "ragym.guards.format_only.format_metric=reward/formt"]
    off += ["algorithm.filter_groups.enable=false", "algorithm.filter_groups.metric=reward/x"]
    assert reward_metric_problems(load_recipe("kbvqa_tiny_cpu", off)) == []
    fine = ["ragym.outcome_metric=reward/verification", "algorithm.filter_groups.enable=true"]
    fine += ["algorithm.filter_groups.metric=reward/outcome"]
    assert reward_metric_problems(load_recipe("kbvqa_tiny_cpu", fine)) == []


def test_both_engines_refuse_a_misspelt_reward_metric_before_a_run_starts(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"ragym.outcome_metric: 'reward/outcom' names no term"):
        build_trainer("kbvqa_tiny_cpu", [*MISSPELT, f"trainer.default_local_dir={tmp_path}"])
    with pytest.raises(UsageError, match=r"algorithm.filter_groups.metric: 'reward/outcome_' names no term"):
        check_recipe("kbvqa_tiny_cpu", MISSPELT, validate=False)
