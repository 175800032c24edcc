"""The staleness bound is one recipe key with one rule (``ragym.rl.off_policy.staleness_problem``): verl's async
trainer modes (``mode_problems``) and the local engine's async rollouts (``read_engine_config``) accept and refuse
the same values, with the same reason."""

from __future__ import annotations

import copy

import pytest
from omegaconf import OmegaConf

from ragym.rl.engine.config import RecipeReader, read_engine_config
from ragym.rl.errors import UsageError
from ragym.rl.off_policy import STALENESS_KEY, staleness_problem
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.recipe.modes import mode_problems

REFUSED = [None, 0, -1, True, 1.5, "2"]
"""Not a positive integer: null (unbounded), below 1, a bool, a float, a string."""
ACCEPTED = [1, 2, 8]


@pytest.fixture(scope="module")
def composed():
    """The tiny CPU recipe with the local engine's async rollouts and ragym's colocated async mode on."""
    overrides = [
        "trainer.total_training_steps=1",
        "ragym.engine.async_rollouts=true",
        "trainer.v1.trainer_mode=ragym_colocate_async",
    ]
    return load_recipe("kbvqa_tiny_cpu", overrides)


def with_bound(config, bound):
    config = copy.deepcopy(config)
    OmegaConf.update(config, STALENESS_KEY, bound, force_add=True)
    return config


def engine_problem(config) -> str | None:
    """The local engine's refusal of ``config`` (None: it reads the bound)."""
    try:
        settings = read_engine_config(RecipeReader(config))
    except UsageError as err:
        return str(err)
    assert settings.async_rollouts and settings.staleness_bound == OmegaConf.select(config, STALENESS_KEY)
    return None


def verl_problem(config) -> str | None:
    """The verl trainer modes' refusal of ``config`` (None: its mode's checks pass)."""
    problems = mode_problems(config)
    return "\n".join(problems) if problems else None


@pytest.mark.parametrize("bound", REFUSED, ids=repr)
def test_both_engines_refuse_what_is_not_a_positive_integer_with_the_same_reason(composed, bound) -> None:
    reason = staleness_problem(bound)
    assert reason is not None
    config = with_bound(composed, bound)
    for problem in (engine_problem(config), verl_problem(config)):
        assert problem is not None and reason in problem


@pytest.mark.parametrize("bound", ACCEPTED)
def test_both_engines_take_a_positive_integer(composed, bound) -> None:
    assert staleness_problem(bound) is None
    config = with_bound(composed, bound)
    assert engine_problem(config) is None
    assert verl_problem(config) is None
