"""Every registered reward: documented with a passing example, finite on many episodes; doctests of rewards/."""

from __future__ import annotations

import doctest
import importlib
import math
import pkgutil

import pytest

from ragym import rewards
from ragym.rewards import get_reward, register_reward, registered_rewards
from ragym.rewards.registry import reward_params
from tests.rewards.synthetic import SyntheticConfig, synthetic_episode

KBVQA_MODULES = ("ragym.rewards.generic", "ragym.rewards.kbvqa")
MODULES = sorted(m.name for m in pkgutil.iter_modules(rewards.__path__, "ragym.rewards."))


@pytest.mark.parametrize("module_name", MODULES)
def test_doctests(module_name: str) -> None:
    result = doctest.testmod(importlib.import_module(module_name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


@pytest.mark.parametrize("name", sorted(registered_rewards()))
def test_every_reward_has_an_example_and_valid_defaults(name: str) -> None:
    fn = get_reward(name)
    assert fn.__doc__ and ">>>" in fn.__doc__, f"reward {name!r} needs a doctest example"
    params_cls = reward_params(name)
    if params_cls is not None:
        params_cls()  # the documented defaults are valid parameters


KBVQA_REWARDS = sorted(n for n, fn in registered_rewards().items() if fn.__module__ in KBVQA_MODULES)


@pytest.mark.parametrize("name", KBVQA_REWARDS)
def test_kbvqa_rewards_stay_finite_on_many_episodes(name: str) -> None:
    fn = get_reward(name)
    cfg = SyntheticConfig(p_malformed=0.3)
    for seed in range(50):
        value = fn(synthetic_episode(seed, num_images=1 + seed % 3, cfg=cfg))
        assert value is None or (isinstance(value, float) and math.isfinite(value)), (name, seed, value)


def test_built_in_rewards_are_registered() -> None:
    assert {"outcome", "format", "verification", "retrieval_recall"} <= set(KBVQA_REWARDS)


def test_duplicate_registration_is_an_error() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_reward("outcome")(lambda episode: 0.0)
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        get_reward("nope")
