"""The reward registry: every reward function by name; a duplicate name is an error."""

from __future__ import annotations

from collections.abc import Callable

from rewards.episode import Episode

RewardFn = Callable[..., "float | None"]
"""``fn(episode: Episode, **params) -> float | None``; params are the recipe's keyword arguments."""

_REWARDS: dict[str, RewardFn] = {}


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: register ``fn(episode, **params) -> float | None`` under ``name``."""

    def decorator(fn: RewardFn) -> RewardFn:
        if name in _REWARDS:
            raise ValueError(f"reward {name!r} is already registered ({_REWARDS[name].__module__})")
        _REWARDS[name] = fn
        return fn

    return decorator


def get_reward(name: str) -> RewardFn:
    """The reward registered under ``name``; the error lists the known names."""
    if name not in _REWARDS:
        raise KeyError(f"unknown reward {name!r}; registered: {sorted(_REWARDS)}")
    return _REWARDS[name]


def registered_rewards() -> dict[str, RewardFn]:
    """Every registered reward by name."""
    return dict(_REWARDS)


__all__ = ["Episode", "RewardFn", "get_reward", "register_reward", "registered_rewards"]
