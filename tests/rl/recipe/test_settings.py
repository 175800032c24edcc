"""Settings are checked before work starts: reward recipes resolve from any directory and fail at load time,
keys nothing reads are errors naming them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragym.rl.cluster.submit import build_submission
from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.train import build_trainer


def inline(delta: str) -> list[str]:
    """Overrides replacing the recipe's reward recipe file with an inline one with this delta."""
    return [
        "~reward.custom_reward_function.reward_kwargs.recipe_path",
        "+reward.custom_reward_function.reward_kwargs.recipe="
        f"{{terms:{{verification:{{weight:1.0,params:{{delta:{delta}}}}}}}}}",
    ]


def test_reward_recipe_path_resolves_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_recipe("kbvqa_tiny_cpu")
    path = Path(config.reward.custom_reward_function.reward_kwargs.recipe_path)
    assert path.is_absolute() and path.is_file() and path.name == "mmagent_r2.yaml"


def test_a_reward_recipe_next_to_the_recipe_wins(tmp_path, monkeypatch):
    recipes = Path(__file__).resolve().parents[3] / "recipes"
    text = (recipes / "kbvqa_tiny_cpu.yaml").read_text()
    text += "reward:\n  custom_reward_function:\n    reward_kwargs:\n      recipe_path: mine.yaml\n"
    shutil.copytree(recipes / "base", tmp_path / "base")  # the bases it composes, beside it as in recipes/
    (tmp_path / "mine.yaml").write_text("terms:\n  format: {weight: 2.0}\n")
    (tmp_path / "r.yaml").write_text(text)
    monkeypatch.chdir(Path("/"))
    config = load_recipe(tmp_path / "r.yaml")
    assert config.reward.custom_reward_function.reward_kwargs.recipe_path == str(
        (tmp_path / "mine.yaml").resolve()
    )


@pytest.mark.parametrize("value", ["high", "-0.3"])
def test_bad_delta_fails_at_submit_dry_run_time(value):
    with pytest.raises(UsageError, match="reward recipe.*delta must be a finite number >= 0"):
        build_submission("kbvqa_qwen2_5_vl_7b", inline(value))


def test_negative_delta_fails_before_training_starts(tmp_path):
    with pytest.raises(UsageError, match="delta must be a finite number >= 0"):
        build_trainer("kbvqa_tiny_cpu", [*inline("-0.1"), f"trainer.default_local_dir={tmp_path}"])


def test_a_key_nothing_reads_is_an_error_naming_it(tmp_path):
    with pytest.raises(UsageError, match=r"ragym\.engine\.batch_wiat_s"):
        build_trainer(
            "kbvqa_tiny_cpu", ["+ragym.engine.batch_wiat_s=1.0", f"trainer.default_local_dir={tmp_path}"]
        )
    with pytest.raises(UsageError, match=r"ragym\.demo\.warm_start\.epoch\b"):
        build_trainer(
            "kbvqa_tiny_cpu", ["+ragym.demo.warm_start.epoch=2", f"trainer.default_local_dir={tmp_path}"]
        )


def test_a_field_of_a_dataclass_within_a_section_is_read_and_a_misspelt_one_is_not():
    """verl's YAML leaves ``mixed_precision`` out of the actor's ``fsdp_config`` though its dataclass
    (``FSDPEngineConfig``) reads it: the CPU platform sets it; a misspelling is still refused."""
    base = ["actor_rollout_ref.model.path=/nonexistent"]
    precision = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    config = check_recipe(
        "kbvqa_qwen2_5_vl_7b", [*base, f"+actor_rollout_ref.actor.fsdp_config.mixed_precision={precision}"]
    )
    assert config.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    with pytest.raises(UsageError, match=r"actor_rollout_ref\.actor\.fsdp_config\.mixed_precison; check"):
        check_recipe(
            "kbvqa_qwen2_5_vl_7b", [*base, f"+actor_rollout_ref.actor.fsdp_config.mixed_precison={precision}"]
        )
