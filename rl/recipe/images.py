"""The recipe's one image budget (``ragym.images``) and everywhere it reaches.

A recipe sets, once, the pixels a query image and a candidate image may occupy, the policy's token size
(``factor``), the processor's ``min_pixels`` and the decoded-image cache of every process::

    ragym.images: {factor, query_max_pixels, candidate_max_pixels, min_pixels, cache_bytes}
    data.mm_processor_kwargs: {min_pixels, max_pixels}          verl's processor: placeholders, training inputs
    actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_kwargs: ${data.mm_processor_kwargs}

The agent loop (verl's workers, the local engine, ``ragym eval``) passes the budget to every env whose config
has the budget fields (unless the row sets the same values) and sizes this process's image cache; the
processor's ``max_pixels`` is the larger budget, so images the envs fitted are not resized again. Keys that
disagree are an error naming them, before any episode runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from ragym.envs.image_budget import BUDGET_FIELDS, ImageBudget
from ragym.envs.registry import config_fields
from ragym.rl.errors import UsageError

log = logging.getLogger(__name__)

IMAGES_KEY = "ragym.images"
"""Recipe key of the image budget."""
PROCESSOR_KEY = "data.mm_processor_kwargs"
"""verl's processor keyword arguments (agent-loop placeholders, training inputs)."""
VLLM_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_kwargs"
"""vLLM's engine-wide processor keyword arguments (its preprocessing and memory profile)."""
RECIPE_FIELDS = ("factor", "query_max_pixels", "candidate_max_pixels", "min_pixels", "cache_bytes")
"""Keys of ``ragym.images``."""


@dataclass(frozen=True)
class RecipeImages:
    """A recipe's ``ragym.images``: the env budget and the per-process image cache."""

    budget: ImageBudget
    """Pixels per query and per candidate image, ``min_pixels`` and the policy's factor."""
    cache_bytes: int
    """Byte budget of each process's decoded-image cache."""

    def processor_kwargs(self) -> dict[str, int]:
        """The ``mm_processor_kwargs`` the budget implies: the larger budget as ``max_pixels``."""
        budget = self.budget
        return {
            "min_pixels": budget.image_min_pixels,
            "max_pixels": max(budget.query_max_pixels, budget.candidate_max_pixels),
        }

    def env_kwargs(self) -> dict[str, int]:
        """The env config fields the budget fills."""
        return {name: getattr(self.budget, name) for name in BUDGET_FIELDS}


def recipe_images(config: DictConfig) -> RecipeImages | None:
    """``ragym.images`` of a composed recipe, checked against the processor keys; None when absent."""
    node = OmegaConf.select(config, IMAGES_KEY, default=None)
    if node is None:
        return None
    values = OmegaConf.to_container(node, resolve=True)
    if not isinstance(values, dict) or set(values) != set(RECIPE_FIELDS):
        got = sorted(values, key=str) if isinstance(values, dict) else values
        raise UsageError(f"{IMAGES_KEY} must have exactly the keys {list(RECIPE_FIELDS)}, got {got}")
    try:
        budget = ImageBudget(
            values["query_max_pixels"], values["candidate_max_pixels"], values["min_pixels"], values["factor"]
        )
    except ValueError as err:
        raise UsageError(f"{IMAGES_KEY}: {err}") from err
    cache_bytes = values["cache_bytes"]
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
        raise UsageError(f"{IMAGES_KEY}.cache_bytes must be an int >= 0, got {cache_bytes!r}")
    images = RecipeImages(budget, cache_bytes)
    _check_processor_keys(config, images)
    return images


def _check_processor_keys(config: DictConfig, images: RecipeImages) -> None:
    """verl's and vLLM's ``mm_processor_kwargs`` must be the budget's: else rollout and training tokenise
    the same images differently from what the envs fitted them to."""
    expected = images.processor_kwargs()
    for key in (PROCESSOR_KEY, VLLM_KEY):
        if key == VLLM_KEY and OmegaConf.select(config, "actor_rollout_ref.rollout.name") != "vllm":
            continue
        node = OmegaConf.select(config, key, default=None)
        got = OmegaConf.to_container(node, resolve=True) if node is not None else None
        if got != expected:
            raise UsageError(f"{key} must be {expected} (from {IMAGES_KEY}), got {got}")


def apply_recipe_images(config: DictConfig) -> RecipeImages | None:
    """Read the recipe's budget and size this process's decoded-image cache to it (logged)."""
    from ragym.envs.image_cache import configure_image_cache

    images = recipe_images(config)
    if images is not None:
        configure_image_cache(images.cache_bytes)
        budget = images.budget
        log.info(
            "image budget: %d tokens per query image, %d per candidate (factor %d)",
            budget.max_tokens("query"),
            budget.max_tokens("candidate"),
            budget.image_factor,
        )
    return images


def with_image_budget(env_id: str, env_kwargs: dict[str, Any], images: RecipeImages | None) -> dict[str, Any]:
    """``env_kwargs`` plus the recipe's budget for an env that shows images; a row that sets a budget field
    to another value is an error (one budget per run: the processor's ``max_pixels`` is sized to it)."""
    if images is None or not set(BUDGET_FIELDS) <= config_fields(env_id):
        return env_kwargs
    budget = images.env_kwargs()
    clash = {k: env_kwargs[k] for k in BUDGET_FIELDS if k in env_kwargs and env_kwargs[k] != budget[k]}
    if clash:
        raise ValueError(f"{env_id} env_kwargs set {clash}, but the recipe's {IMAGES_KEY} gives {budget}")
    return {**env_kwargs, **budget}


def recipe_processor_kwargs(config: DictConfig) -> dict[str, Any]:
    """``data.mm_processor_kwargs`` of a composed recipe (empty when unset), checked as above."""
    recipe_images(config)
    node = OmegaConf.select(config, PROCESSOR_KEY, default=None)
    if node is None:
        return {}
    # verl's config declares the section a mapping: a DictConfig, whose container is a dict.
    return dict(cast(dict[str, Any], OmegaConf.to_container(node, resolve=True)))


def check_processor_factor(images: RecipeImages | None, processor: Any) -> None:
    """The recipe's ``factor`` must be the loaded policy's patch size x merge size."""
    if images is None:
        return
    image_processor = processor.image_processor
    factor = int(image_processor.patch_size) * int(image_processor.merge_size)
    if factor != images.budget.image_factor:
        raise UsageError(
            f"{IMAGES_KEY}.factor is {images.budget.image_factor} but the policy's processor has patch size "
            f"{image_processor.patch_size} x merge size {image_processor.merge_size} = {factor}"
        )
