"""``reward_kwargs.overrides``: change a reward-recipe parameter from the command line, checked at load."""

from __future__ import annotations

import copy

import pytest
import yaml
from omegaconf import OmegaConf

from ragym.rewards import Rubric
from ragym.rewards.rubric import apply_overrides, load_recipe
from ragym.rewards.verl import compute_score
from ragym.rl.errors import UsageError
from ragym.rl.recipe.compose import REWARD_KWARGS
from ragym.rl.recipe.compose import load_recipe as load_training_recipe
from tests.rewards.test_verl import PAPER_RECIPE, verl_args

DELTA = f"+{REWARD_KWARGS}.overrides.terms.verification.params.delta=0.3"
"""The example override of docs/rewards.md."""


def _paper_with_delta(delta: float) -> dict:
    recipe = copy.deepcopy(yaml.safe_load(PAPER_RECIPE.read_text()))
    recipe["terms"]["verification"]["params"]["delta"] = delta
    return recipe


def test_an_override_scores_like_an_edited_copy_of_the_recipe() -> None:
    overrides = {"terms": {"verification": {"params": {"delta": 0.3}}}}
    edited = _paper_with_delta(0.3)
    changed = 0
    for seed in range(8):
        args = verl_args(seed)
        by_override = compute_score(**args, recipe_path=str(PAPER_RECIPE), overrides=overrides)
        assert by_override == compute_score(**args, recipe=edited)
        changed += by_override != compute_score(**args, recipe_path=str(PAPER_RECIPE))
    assert changed > 0  # some episodes reject a batch, so delta moves their reward


def test_overrides_are_validated() -> None:
    recipe = _paper_with_delta(0.2)
    with pytest.raises(
        ValueError, match=r"names term\(s\) \['verificaton'\] the reward recipe does not have"
    ):
        apply_overrides(recipe, {"terms": {"verificaton": {"weight": 2.0}}}, "r")
    with pytest.raises(ValueError, match="overrides must be a mapping"):
        apply_overrides(recipe, "delta=0.3", "r")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['deltaa'\]"):
        Rubric.from_recipe(
            apply_overrides(recipe, {"terms": {"verification": {"params": {"deltaa": 1}}}}, "r")
        )
    assert apply_overrides(recipe, None, "r") == recipe


def test_the_command_line_override_reaches_the_reward_and_bad_ones_fail_at_load() -> None:
    config = load_training_recipe("kbvqa_qwen2_5_vl_7b", [DELTA])
    kwargs = OmegaConf.to_container(OmegaConf.select(config, REWARD_KWARGS), resolve=True)
    args = verl_args(3)
    assert compute_score(**args, **kwargs) == compute_score(**args, recipe=_paper_with_delta(0.3))
    with pytest.raises(UsageError, match=r"\['verificaton'\]"):
        load_training_recipe("kbvqa_qwen2_5_vl_7b", [DELTA.replace("verification", "verificaton")])
    with pytest.raises(UsageError, match="delta must be a finite number"):
        load_training_recipe("kbvqa_qwen2_5_vl_7b", [DELTA.replace("0.3", "abc")])
    stale = f"{REWARD_KWARGS}.recipe.terms.verification.params.delta=0.3"  # the old inline-recipe form
    with pytest.raises(
        UsageError, match=r"overridden with \+reward\.custom_reward_function\.reward_kwargs\.overrides"
    ):
        load_training_recipe("kbvqa_qwen2_5_vl_7b", [stale])


def test_a_training_recipe_file_with_overrides_scores_offline(tmp_path) -> None:
    training = {
        "reward": {
            "custom_reward_function": {
                "reward_kwargs": {
                    "recipe_path": str(PAPER_RECIPE),
                    "overrides": {"terms": {"verification": {"params": {"delta": 0.3}}}},
                }
            }
        }
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(training))
    assert load_recipe(path)[0]["terms"]["verification"]["params"]["delta"] == 0.3


def test_a_reward_kwargs_key_compute_score_refuses_fails_at_load() -> None:
    # compute_score refused both only at the first reward, after the job had loaded its model.
    misspelt = DELTA.replace(".overrides.", ".overide.")
    with pytest.raises(
        UsageError, match=r"unknown key\(s\) \['overide'\]; ragym's compute_score takes recipe"
    ):
        load_training_recipe("kbvqa_qwen2_5_vl_7b", [misspelt])
    inline = f"+{REWARD_KWARGS}.recipe={{terms:{{outcome:{{weight:1.0}}}}}}"  # beside the base's recipe_path
    with pytest.raises(UsageError, match="exactly one of recipe and recipe_path.*got recipe and recipe_path"):
        load_training_recipe("kbvqa_qwen2_5_vl_7b", [inline])
    with pytest.raises(UsageError, match="exactly one of recipe and recipe_path.*got neither"):
        load_training_recipe("kbvqa_qwen2_5_vl_7b", [f"{REWARD_KWARGS}.recipe_path=null"])
    config = load_training_recipe("kbvqa_qwen2_5_vl_7b", [f"{REWARD_KWARGS}.recipe_path=null", inline])
    assert OmegaConf.select(config, f"{REWARD_KWARGS}.recipe.terms.outcome.weight") == 1.0
