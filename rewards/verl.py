"""verl's ``custom_reward_function`` seam: score an agent-loop episode with a reward recipe.

In a training recipe::

    reward:
      custom_reward_function:
        path: pkg://ragym.rewards.verl      # imported as a package module, so its rubric cache is shared
        name: compute_score
        reward_kwargs:
          recipe: {terms: {outcome: {weight: 1.0}, ...}}    # or recipe_path: recipes/rewards/mmagent_r2.yaml
          overrides: {terms: {verification: {params: {delta: 0.3}}}}   # optional, merged onto the recipe

The ragym agent loop puts the env's ``events``, the policy's ``turns`` and ``truncated`` into
``extra_fields``; verl hands them to this function inside ``extra_info``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ragym.rewards.episode import Episode
from ragym.rewards.rubric import Rubric, apply_overrides, load_recipe, plain_config

# Keyword arguments verl itself may add to every call; they mean nothing to a rule-based rubric.
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
RECIPE_KWARGS = ("recipe", "recipe_path", "overrides")
"""The ``reward_kwargs`` a training recipe gives ``compute_score``: a reward recipe or its path, and overrides."""
_EXTRA_KEYS = ("index", "split", "num_turns")


@functools.lru_cache(maxsize=32)
def _rubric_from_json(recipe_json: str) -> Rubric:
    return Rubric.from_recipe(json.loads(recipe_json))


def _recipe_file(recipe_path: str) -> Path:
    path = Path(recipe_path)
    if not path.is_absolute() and not path.is_file():
        # Committed recipes name reward recipes relative to the repository root, wherever verl runs.
        path = Path(__file__).resolve().parents[1] / path
    return path


@functools.lru_cache(maxsize=32)
def _rubric_from_path(recipe_path: str, overrides_json: str = "null") -> Rubric:
    path = _recipe_file(recipe_path)
    if overrides_json == "null":
        return Rubric.from_recipe(path)
    recipe, where = load_recipe(path)
    return Rubric.from_recipe(apply_overrides(recipe, json.loads(overrides_json), where))


def rubric_for(
    recipe: Mapping[str, Any] | None = None, recipe_path: str | None = None, overrides: Any = None
) -> Rubric:
    """The rubric for exactly one of ``recipe`` (a dict) or ``recipe_path``, with ``overrides`` merged in
    (``ragym.rewards.rubric.apply_overrides``), built once per process."""
    if (recipe is None) == (recipe_path is None):
        raise TypeError("pass exactly one of reward_kwargs.recipe or reward_kwargs.recipe_path")
    overrides_json = json.dumps(plain_config(overrides), sort_keys=True)
    if recipe_path is not None:
        return _rubric_from_path(str(recipe_path), overrides_json)
    merged = apply_overrides(plain_config(recipe), plain_config(overrides), "reward_kwargs.recipe")
    return _rubric_from_json(json.dumps(merged, sort_keys=True))


def _as_list(value: Any, name: str) -> list[Any]:
    """A list from what verl may hand over: a list, a numpy object array, or a JSON string."""
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"extra_info[{name!r}] must be a list, got {type(value).__name__}")
    return list(value)


def episode_from_verl(data_source: str, ground_truth: Any, extra_info: Mapping[str, Any] | None) -> Episode:
    """Rebuild the episode from verl's arguments; the ground truth arrives as the row's JSON string."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{data_source}: reward_model.ground_truth must be the JSON string of the annotation, "
                f"got {ground_truth[:200]!r}"
            ) from err
    extra_info = dict(extra_info or {})
    if "events" not in extra_info:
        raise ValueError(
            f"{data_source}: extra_info has no 'events'; the ragym agent loop passes the env's events in "
            f"extra_fields (keys present: {sorted(extra_info)})"
        )
    return Episode(
        data_source=str(data_source),
        turns=[str(t) for t in _as_list(extra_info.get("turns", []), "turns")],
        events=_as_list(extra_info["events"], "events"),
        ground_truth=ground_truth,
        truncated=bool(extra_info.get("truncated", False)),
        extra={k: extra_info[k] for k in _EXTRA_KEYS if k in extra_info},
        env_id=str(extra_info["env_id"]) if extra_info.get("env_id") is not None else None,
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """``{"score": total, "reward/<term>": value, ...}`` for one verl sample (skipped terms log 0.0).

    ``solution_str`` is not read: the answer comes from the env's ``answer`` event, never from free text.
    """
    recipe, recipe_path = kwargs.pop("recipe", None), kwargs.pop("recipe_path", None)
    overrides = kwargs.pop("overrides", None)
    unknown = sorted(set(kwargs) - _VERL_KWARGS)
    if unknown:
        raise TypeError(
            f"compute_score got unknown reward_kwargs {unknown}; expected recipe or recipe_path (and overrides)"
        )
    rubric = rubric_for(recipe, recipe_path, overrides)
    result = rubric.score(episode_from_verl(data_source, ground_truth, extra_info))
    return {"score": result.total, **result.metrics()}
