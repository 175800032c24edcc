"""The override sets users apply to any recipe (recipes/platforms/): each composes on every training recipe,
every key is commented, and merging lets a later group (the user's) win."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.envs.hooks import env_hooks, hooked_envs
from ragym.rl.recipe.check import check_recipe, uncommented_knobs
from ragym.rl.recipe.platforms import PLATFORMS_DIR, cluster_overrides, merge_overrides, platform_overrides
from ragym.rl.verl_plugin.verl_local import toy_platform

PAPER_RECIPES = sorted({env_hooks(env_id).paper_recipe for env_id in hooked_envs()} - {None})
"""Every env's paper recipe (``EnvHooks.paper_recipe``)."""


@pytest.mark.parametrize("name", ["cpu", "toy"])
def test_every_key_is_commented(name: str) -> None:
    assert uncommented_knobs((PLATFORMS_DIR / f"{name}.yaml").read_text()) == []


@pytest.mark.parametrize("recipe", PAPER_RECIPES)
def test_cpu_and_toy_compose_on_every_paper_recipe(recipe: str) -> None:
    config = check_recipe(recipe, merge_overrides(platform_overrides("cpu"), platform_overrides("toy")))
    assert config.actor_rollout_ref.rollout.name == "hf"
    assert config.actor_rollout_ref.actor.strategy == "fsdp2"
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    # One logical GPU per trainer worker for a Ray instance the trainer starts itself.
    assert config.ray_kwargs.ray_init.num_gpus == config.trainer.n_gpus_per_node == 1
    assert config.data.train_batch_size == 4 and config.trainer.total_training_steps == 2
    # The actor and the reference policy in float32, the hf rollout's dtype (verl's default bf16 autocast is emulated
    # on most CPUs, and its rounding alone makes a KL term where the policy has not moved).
    for role in ("actor", "ref"):
        assert dict(config.actor_rollout_ref[role].fsdp_config.mixed_precision) == dict.fromkeys(
            ("param_dtype", "reduce_dtype", "buffer_dtype"), "fp32"
        ), role


@pytest.mark.slow
@pytest.mark.parametrize("recipe", PAPER_RECIPES)
def test_every_toy_prompt_fits_the_toy_prompt_length(recipe: str, tiny_policy_dir, tmp_path) -> None:
    """The agent loop records a prompt over ``rollout.prompt_length`` as an error episode (verl's helper had cut it
    from its start, silently): toy.yaml's 1024 was below MEMORA's (then up to 2,879 of the toy policy's tokens, 1,793
    since its toy rows show 12 candidates) and DocMemo's (1,268), so their toy runs trained on prompts without their
    start. Those envs raise it for their own runs (``EnvHooks.toy_prompt_length``, ``toy_platform``)."""
    import asyncio

    import pandas as pd

    from ragym.data_prep.toy_data import toy_env, toy_rows
    from ragym.envs.events import events_of
    from ragym.rl.agent_loop.loop import make_agent_loop
    from ragym.rl.models import load_processor
    from tests.rl.fakes import ScriptedServer

    env_id = toy_env(Path(recipe))
    data = toy_rows(env_id, tmp_path / env_id)
    policy = tiny_policy_dir("qwen2_5_vl")  # the toy's policy before its warm start: the same tokenizer
    overrides = merge_overrides(platform_overrides("cpu"), toy_platform(env_id))
    config = check_recipe(recipe, [*overrides, f"actor_rollout_ref.model.path={policy}"])
    length = env_hooks(env_id).toy_prompt_length
    assert config.actor_rollout_ref.rollout.prompt_length == (length or 1024)
    assert config.actor_rollout_ref.rollout.max_model_len == (length or 1024) + 1024
    processor = load_processor(policy)
    loop = make_agent_loop(config, ScriptedServer(processor.tokenizer, ["x"]), processor.tokenizer, processor)
    for split in ("train", "test"):
        for row in pd.read_parquet(data / f"{split}.parquet").to_dict("records"):
            output = asyncio.run(
                loop.run({"logprobs": False}, extra_info=dict(row["extra_info"]), priority=0)
            )
            assert not events_of(output.extra_fields["events"], "episode_error"), output.extra_fields[
                "events"
            ]
            assert len(output.prompt_ids) <= config.actor_rollout_ref.rollout.prompt_length


def test_a_later_group_wins_and_added_keys_keep_their_plus() -> None:
    merged = merge_overrides(["a.b=1", "+c.d=2"], ["a.b=3", "c.d=4", "e=5"])
    assert merged == ["a.b=3", "c.d=4", "e=5"]
    assert merge_overrides(["+x=1"], ["y=2"]) == ["+x=1", "y=2"]


def test_a_cluster_job_gets_no_ray_init_arguments() -> None:
    # Joining a running cluster, ray.init refuses num_cpus / num_gpus.
    keys = [o.split("=", 1)[0].lstrip("+") for o in cluster_overrides("cpu")]
    assert keys and not [k for k in keys if k.startswith("ray_kwargs.")]
    assert "actor_rollout_ref.rollout.name" in keys
