"""Every shipped recipe's vLLM server arguments pass ``vllm serve``'s own parser, as verl hands them over."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import RECIPES_DIR
from ragym.rl.recipe.vllm_args import server_settings, vllm_engine_args
from tests.vllm_cpu import need_vllm_cpu

VLLM_RECIPES = sorted(
    path
    for path in RECIPES_DIR.glob("*.yaml")
    if OmegaConf.select(check_recipe(path, validate=False), "actor_rollout_ref.rollout.name") == "vllm"
)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Qwen2.5-VL folder: vLLM's parser only needs a model argument, not its weights."""
    from ragym.rl.tiny.policy import build_tiny_policy

    return str(build_tiny_policy("qwen2_5_vl", tmp_path_factory.mktemp("policy")))


def test_the_paper_recipes_use_vllm() -> None:
    names = {path.stem for path in VLLM_RECIPES}
    assert {"kbvqa_qwen2_5_vl_7b", "kbvqa_qwen3_vl_8b", "docmemo_qwen2_5_vl_7b", "r3g_qwen2_5_vl_7b"} <= names


@pytest.mark.parametrize("path", VLLM_RECIPES, ids=lambda path: path.stem)
def test_vllm_takes_the_recipe_arguments(path: Path, model_path: str) -> None:
    need_vllm_cpu()
    config = check_recipe(path, validate=False)
    args = vllm_engine_args(config, model_path)
    rollout = config.actor_rollout_ref.rollout
    assert args.max_model_len == rollout.max_model_len
    assert args.tensor_parallel_size == rollout.tensor_model_parallel_size
    assert args.gpu_memory_utilization == rollout.gpu_memory_utilization
    # Every engine_kwargs entry reached vLLM under its own name.
    for key, value in (rollout.engine_kwargs.vllm or {}).items():
        if value is not None and key != "mm_processor_kwargs":
            assert getattr(args, key) == value, key


def test_the_paper_recipes_turn_the_multimodal_cache_off(model_path: str) -> None:
    need_vllm_cpu()
    config = check_recipe(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml", validate=False)
    assert vllm_engine_args(config, model_path).mm_processor_cache_gb == 0


def test_a_flag_vllm_removed_fails(model_path: str) -> None:
    need_vllm_cpu()
    removed = "+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache=true"
    config = check_recipe(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml", [removed], validate=False)
    with pytest.raises(ValueError, match="disable-mm-preprocessor-cache"):
        vllm_engine_args(config, model_path)


def test_settings_follow_the_recipe() -> None:
    overrides = [
        "+actor_rollout_ref.rollout.limit_images=3",
        "actor_rollout_ref.rollout.max_num_batched_tokens=999",
    ]
    config = check_recipe(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml", overrides, validate=False)
    settings = server_settings(config)
    assert settings["limit_mm_per_prompt"] == {"image": 3}
    assert settings["max_num_batched_tokens"] == 999
    assert settings["mm_processor_cache_gb"] == 0
