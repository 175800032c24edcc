"""``ragym.rl.lora``: verl's LoRA keys read once, ragym's vision-tower default reaching verl's trainer through a
Hydra override, and weight names compared without peft's wrapping."""

from __future__ import annotations

import doctest
import re

import pytest
from omegaconf import OmegaConf

from ragym.rl import lora
from ragym.rl.errors import UsageError
from ragym.rl.lora import VISION_TOWER, read_lora, verl_lora_overrides
from ragym.rl.recipe.check import check_recipe

MODEL = "actor_rollout_ref.model"


def test_doctests() -> None:
    assert doctest.testmod(lora).failed == 0


@pytest.mark.parametrize(
    ("name", "adapted"),
    [
        ("model.visual.blocks.0.mlp.gate_proj", False),
        ("model.visual.merger.mlp.0", False),
        ("model.visual.deepstack_merger_list.0.linear_fc1", False),
        ("model.language_model.layers.0.mlp.gate_proj", True),
        ("model.language_model.layers.3.self_attn.q_proj", True),
        ("model.visualizer_head", True),  # a module merely named like the tower is not excluded
    ],
)
def test_the_vision_tower_regex_matches_the_tower_only(name: str, adapted: bool) -> None:
    assert (re.fullmatch(VISION_TOWER, name) is None) == adapted


def test_verl_runs_get_the_vision_tower_excluded_when_the_recipe_says_nothing() -> None:
    overrides = [f"{MODEL}.lora_rank=8"]
    config = check_recipe("kbvqa_qwen2_5_vl_7b", overrides, validate=False)
    extra = verl_lora_overrides(config)
    assert len(extra) == 1
    composed = check_recipe("kbvqa_qwen2_5_vl_7b", overrides + extra, validate=False)
    assert (
        composed.actor_rollout_ref.model.exclude_modules == VISION_TOWER
    )  # Hydra took the quoted regex as is
    assert verl_lora_overrides(composed) == []  # set: nothing to add
    assert verl_lora_overrides(check_recipe("kbvqa_qwen2_5_vl_7b", validate=False)) == []  # LoRA off


def test_read_lora_takes_verls_defaults_and_refuses_bad_values() -> None:
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "model": {
                    "lora_rank": 16,
                    "lora_alpha": 16,
                    "target_modules": "all-linear",
                    "exclude_modules": None,
                    "lora_adapter_path": None,
                }
            }
        }
    )

    def get(key: str):
        return OmegaConf.select(config, key)

    settings = read_lora(get)
    assert (settings.rank, settings.alpha, settings.exclude_modules) == (16, 16, VISION_TOWER)
    config.actor_rollout_ref.model.lora_rank = 0
    assert read_lora(get) is None
    config.actor_rollout_ref.model.lora_rank = 4
    config.actor_rollout_ref.model.target_modules = [3]
    with pytest.raises(UsageError, match="target_modules"):
        read_lora(get)


def test_peft_config_carries_every_setting() -> None:
    """The ``LoraConfig`` the local engine and ``ragym export``'s merge build names the target modules, rank, alpha
    and excluded modules of the settings (peft refuses a config without target modules when it injects one)."""
    settings = lora.LoraSettings(
        rank=8,
        alpha=16.0,
        target_modules=["q_proj", "v_proj"],
        exclude_modules=VISION_TOWER,
        adapter_path=None,
    )
    config = settings.peft_config("base")
    assert (config.r, config.lora_alpha, config.exclude_modules) == (8, 16.0, VISION_TOWER)
    assert set(config.target_modules) == {"q_proj", "v_proj"} and config.base_model_name_or_path == "base"
