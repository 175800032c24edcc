"""Every shipped recipe's vLLM server arguments pass ``vllm serve``'s own parser (the CPU build, 0.32), as verl hands
them over, and are among vLLM 0.24.0's engine arguments (the GPU pin, read from its wheel into a fixture)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import RECIPES_DIR
from ragym.rl.recipe.vllm_args import server_settings, vllm_engine_args
from tests.vllm_cpu import need_vllm_cpu

LOCAL_ENGINE_RECIPES = {"kbvqa_tiny_cpu", "r3g_tiny_cpu"}
"""The CPU demos' recipes (the local engine, hf rollout); every other shipped recipe rolls out with vLLM. Named,
not found by composing every recipe at import: each xdist worker imports this module while it collects, and the
ten compositions were about 10 s of each worker's collection
(``test_the_recipes_that_roll_out_with_vllm_are_the_ones_tested`` composes them once)."""
VLLM_RECIPES = sorted(path for path in RECIPES_DIR.glob("*.yaml") if path.stem not in LOCAL_ENGINE_RECIPES)


def test_the_recipes_that_roll_out_with_vllm_are_the_ones_tested() -> None:
    composed = {
        path.stem
        for path in RECIPES_DIR.glob("*.yaml")
        if OmegaConf.select(check_recipe(path, validate=False), "actor_rollout_ref.rollout.name") == "vllm"
    }
    assert composed == {path.stem for path in VLLM_RECIPES}


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


VLLM_PINNED = Path(__file__).parent / "fixtures" / "vllm_0_24_0_engine_args.json"
"""vLLM 0.24.0's engine arguments (the GPU install's pin), read from its wheel's ``vllm/engine/arg_utils.py`` by
``benchmarks/vllm_engine_args.py``: the GPU's vLLM, checked without installing it."""
PLAIN_TYPES = {"int": int, "float": (int, float), "bool": bool, "str": str}


def pinned_fields() -> dict[str, str]:
    return json.loads(VLLM_PINNED.read_text())["fields"]


def test_the_fixture_is_the_pinned_vllm() -> None:
    pin = re.search(r'"vllm==([0-9.]+)"', (RECIPES_DIR.parent / "setup.py").read_text())
    assert pin and json.loads(VLLM_PINNED.read_text())["vllm"] == pin.group(1)
    assert {"max_model_len", "gpu_memory_utilization", "mm_processor_cache_gb"} <= pinned_fields().keys()


@pytest.mark.parametrize("path", VLLM_RECIPES, ids=lambda path: path.stem)
def test_the_pinned_vllm_takes_the_recipe_arguments(path: Path) -> None:
    """Every argument verl hands ``vllm serve`` for the recipe is one of 0.24.0's engine arguments, of its type where
    that is a plain one."""
    fields = pinned_fields()
    settings = server_settings(check_recipe(path, validate=False))
    assert sorted(set(settings) - set(fields)) == []
    for key, value in settings.items():
        plain = PLAIN_TYPES.get(fields[key])
        assert plain is None or isinstance(value, plain), (key, value, fields[key])


def test_a_flag_the_pinned_vllm_lacks_fails() -> None:
    removed = "+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache=true"
    config = check_recipe(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml", [removed], validate=False)
    assert sorted(set(server_settings(config)) - set(pinned_fields())) == ["disable_mm_preprocessor_cache"]
