"""The override sets users apply to any recipe (recipes/platforms/): each composes on every training recipe,
every key is commented, and merging lets a later group (the user's) win."""

from __future__ import annotations

import pytest

from ragym.envs.hooks import env_hooks, hooked_envs
from ragym.rl.recipe.check import check_recipe, uncommented_knobs
from ragym.rl.recipe.platforms import PLATFORMS_DIR, cluster_overrides, merge_overrides, platform_overrides

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


def test_a_later_group_wins_and_added_keys_keep_their_plus() -> None:
    merged = merge_overrides(["a.b=1", "+c.d=2"], ["a.b=3", "c.d=4", "e=5"])
    assert merged == ["a.b=3", "c.d=4", "e=5"]
    assert merge_overrides(["+x=1"], ["y=2"]) == ["+x=1", "y=2"]


def test_a_cluster_job_gets_no_ray_init_arguments() -> None:
    # Joining a running cluster, ray.init refuses num_cpus / num_gpus.
    keys = [o.split("=", 1)[0].lstrip("+") for o in cluster_overrides("cpu")]
    assert keys and not [k for k in keys if k.startswith("ray_kwargs.")]
    assert "actor_rollout_ref.rollout.name" in keys
