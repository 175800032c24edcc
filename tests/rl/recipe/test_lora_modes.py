"""Trainer modes x LoRA x rollouts: every combination without a test that the rollout serves the trained adapters
is refused in one line by the recipe check (``ragym.rl.recipe.check``), before any worker starts; the others
pass it. One case per refused combination."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import resolve_recipe_path
from ragym.rl.recipe.modes import CPU_VLLM_EXTENSION, LORA_ROLLOUTS, rollout_kind

RECIPE = "kbvqa_qwen2_5_vl_7b"
LORA = "actor_rollout_ref.model.lora_rank=8"
MERGE = "actor_rollout_ref.model.lora.merge=true"
COLOCATE = "trainer.v1.trainer_mode=ragym_colocate_async"
SEPARATE = [
    "trainer.v1.trainer_mode=ragym_separate_async",
    "trainer.v1.separate_async.parameter_sync_step=1",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
]
HF = "actor_rollout_ref.rollout.name=hf"
HF_SEPARATE = [HF, "actor_rollout_ref.rollout.checkpoint_engine.backend=ragym_object_store"]
VLLM_CPU = f"+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls={CPU_VLLM_EXTENSION}"


def recipe(*overrides: str):
    return check_recipe(resolve_recipe_path(RECIPE), list(overrides), validate=False)


def refusal(*overrides: str) -> str:
    with pytest.raises(UsageError) as caught:
        recipe(*overrides)
    message = str(caught.value).removeprefix(f"recipe {resolve_recipe_path(RECIPE)}: ")
    assert "\n" not in message, message  # one line
    return message


def test_the_cpu_vllm_extension_is_the_one_its_platform_file_names():
    platform = Path(__file__).resolve().parents[3] / "recipes" / "platforms" / "vllm_cpu.yaml"
    overrides = yaml.safe_load(platform.read_text())
    assert (
        overrides["+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls"] == CPU_VLLM_EXTENSION
    )
    assert rollout_kind(recipe(VLLM_CPU)) == "vllm_cpu" and rollout_kind(recipe()) == "vllm"


@pytest.mark.parametrize("mode", [[COLOCATE], SEPARATE], ids=["colocate_async", "separate_async"])
def test_lora_on_the_cpu_vllm_rollout_runs_in_sync_mode_only(mode):
    # In an async mode the rollout itself is refused (one line); sync LoRA: tests/launch/test_verl_vllm.py.
    assert "with ragym's CPU vLLM rollout: untested there" in refusal(LORA, VLLM_CPU, *mode)
    recipe(LORA, VLLM_CPU)


@pytest.mark.parametrize("mode", [[COLOCATE], SEPARATE], ids=["colocate_async", "separate_async"])
def test_the_cpu_vllm_rollout_is_refused_in_the_async_modes(mode):
    assert "with ragym's CPU vLLM rollout: untested there" in refusal(VLLM_CPU, *mode)
    recipe(VLLM_CPU)  # sync with full weights: tests/launch/test_verl_vllm.py


@pytest.mark.parametrize("mode", [[COLOCATE], SEPARATE], ids=["colocate_async", "separate_async"])
def test_lora_on_the_gpu_vllm_rollout_is_refused_in_the_async_modes(mode):
    assert "with the vllm rollout: no test shows the rollout serving the trained adapters" in refusal(
        LORA, *mode
    )
    recipe(*mode)  # full weights pass


@pytest.mark.parametrize(
    "mode", [[COLOCATE, HF], [*SEPARATE, *HF_SEPARATE]], ids=["colocate_async", "separate_async"]
)
def test_merged_lora_syncs_are_refused_in_the_async_modes(mode):
    assert "merged-weight syncs are untested" in refusal(LORA, MERGE, *mode)


@pytest.mark.parametrize(
    ("mode", "ragym_mode"),
    [([COLOCATE, HF], "ragym_colocate_async"), ([*SEPARATE, *HF_SEPARATE], "ragym_separate_async")],
    ids=["colocate_async", "separate_async"],
)
def test_lora_on_the_hf_rollout_in_an_async_mode_passes_only_once_tested(mode, ragym_mode):
    if "hf" in LORA_ROLLOUTS[ragym_mode]:
        recipe(LORA, *mode)
    else:
        assert "with the hf rollout: no test shows" in refusal(LORA, *mode)


def test_lora_in_sync_passes_on_the_hf_and_the_gpu_vllm_rollout():
    recipe(LORA, HF)
    recipe(LORA, HF, MERGE)
    recipe(LORA)  # verl's own path, the shipped kbvqa_qwen2_5_vl_7b_lora recipes'
    recipe(COLOCATE, HF)  # no LoRA: nothing to refuse


def test_the_partial_rollout_setting_is_checked_with_the_recipe():
    key = "+actor_rollout_ref.rollout.custom.partial_rollout"
    recipe(COLOCATE, HF, f"{key}=finish")
    recipe(COLOCATE, f"{key}=resume")
    assert "choose one of resume, finish" in refusal(COLOCATE, HF, f"{key}=later")
    assert "only the hf rollout finishes turns" in refusal(
        COLOCATE, f"{key}=finish"
    )  # vLLM aborts and resumes
