"""The ragym environment registry: one name per env class, registered with gymnasium too."""

from __future__ import annotations

import gymnasium

_ENVS: dict[str, str] = {}


def register_env(env_id: str, entry_point: str, **kwargs) -> None:
    """Register ``env_id`` (versioned, e.g. ``KBVQA-v0``) with ragym and gymnasium; duplicates are an error."""
    if env_id in _ENVS:
        raise ValueError(f"environment {env_id!r} is already registered (by {_ENVS[env_id]})")
    _ENVS[env_id] = entry_point
    gymnasium.register(id=env_id, entry_point=entry_point, **kwargs)


def registered_envs() -> dict[str, str]:
    """Every ragym env id and its entry point."""
    return dict(_ENVS)


def make_env(env_id: str, **kwargs) -> gymnasium.Env:
    """Build a registered ragym env, unwrapped (the agent loop needs the raw env, no checker wrappers)."""
    if env_id not in _ENVS:
        raise KeyError(f"unknown environment {env_id!r}; registered: {sorted(_ENVS)}")
    return gymnasium.make(env_id, disable_env_checker=True, **kwargs).unwrapped


SYNTHETIC_DATA_GROUP = "ragym.synthetic_data"
"""Entry-point group of the builders behind an env's built-in synthetic data (``name = module:function``)."""


def synthetic_data(name: str, preset: str) -> str:
    """The folder of built-in synthetic data ``name`` (e.g. ``kbvqa``) for ``preset``, built once and cached.

    Envs reach their synthetic data through an installed entry point rather than an import, so no env
    depends on data preparation; ragym's ``setup.py`` declares ``data_prep``'s builders as the providers.
    """
    from importlib.metadata import entry_points

    found = list(entry_points(group=SYNTHETIC_DATA_GROUP, name=name))
    if not found:
        raise LookupError(
            f"no synthetic data {name!r} is installed (entry points {SYNTHETIC_DATA_GROUP!r}); "
            "pass a data folder instead, or reinstall ragym (pip install -e .)"
        )
    return str(found[0].load()(preset))
