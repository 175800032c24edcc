"""The reward registry: every reward function by name; a duplicate name is an error."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from ragym.rewards.episode import Episode

RewardFn = Callable[..., "float | None"]
"""``fn(episode: Episode, **params) -> float | None``; params are the recipe's keyword arguments."""

_REWARDS: dict[str, RewardFn] = {}
_PARAMS: dict[str, type] = {}


def register_reward(name: str, params: type | None = None) -> Callable[[RewardFn], RewardFn]:
    """Decorator: register ``fn(episode, **params) -> float | None`` under ``name``.

    ``params`` is an optional frozen dataclass whose fields are the reward's recipe parameters (with the
    paper's defaults); without it the parameters are read from ``fn``'s keyword arguments.
    """
    if params is not None and not dataclasses.is_dataclass(params):
        raise TypeError(f"reward {name!r}: params must be a dataclass, got {params!r}")

    def decorator(fn: RewardFn) -> RewardFn:
        if name in _REWARDS:
            raise ValueError(f"reward {name!r} is already registered ({_REWARDS[name].__module__})")
        _REWARDS[name] = fn
        if params is not None:
            _PARAMS[name] = params
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


def reward_params(name: str) -> type | None:
    """The params dataclass registered with reward ``name`` (None when it takes plain keyword arguments)."""
    get_reward(name)
    return _PARAMS.get(name)


def accepted_params(fn: RewardFn, params_cls: type | None = None) -> set[str] | None:
    """The parameter names ``fn`` accepts (None: any name, because ``fn`` takes ``**kwargs``)."""
    if params_cls is not None:
        return {f.name for f in dataclasses.fields(params_cls)}
    signature = inspect.signature(fn)
    names = set()
    for i, p in enumerate(signature.parameters.values()):
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        # The first positional parameter is the episode, never a recipe parameter.
        if i > 0 and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.add(p.name)
    return names


def validate_params(label: str, fn: RewardFn, params: dict[str, Any], params_cls: type | None = None) -> None:
    """Raise ``ValueError`` naming ``label`` and the parameter when ``params`` does not fit ``fn``."""
    accepted = accepted_params(fn, params_cls)
    if accepted is not None:
        unknown = sorted(set(params) - accepted)
        if unknown:
            raise ValueError(f"{label}: unknown parameter(s) {unknown}; accepted: {sorted(accepted)}")
    if params_cls is not None:
        try:
            params_cls(**params)  # the dataclass's __post_init__ checks values
        except (TypeError, ValueError) as err:
            raise ValueError(f"{label}: bad parameter value: {err}") from err
        return
    signature = inspect.signature(fn)
    try:
        signature.bind(None, **params)
    except TypeError as err:
        raise ValueError(
            f"{label}: parameters {sorted(params)} do not fit {fn.__name__}{signature}: {err}"
        ) from err


__all__ = [
    "Episode",
    "RewardFn",
    "accepted_params",
    "get_reward",
    "register_reward",
    "registered_rewards",
    "reward_params",
    "validate_params",
]
