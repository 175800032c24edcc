"""Override sets a user applies to any recipe: ``recipes/platforms/cpu.yaml`` (verl on machines without a GPU)
and ``recipes/platforms/toy.yaml`` (seconds per step)."""

from __future__ import annotations

import yaml

from ragym.rl.recipe.compose import RECIPES_DIR

PLATFORMS_DIR = RECIPES_DIR / "platforms"
"""Where the override sets live."""


def platform_overrides(name: str) -> list[str]:
    """The Hydra overrides (``key=value``) of ``recipes/platforms/NAME.yaml``, in file order."""
    path = PLATFORMS_DIR / f"{name}.yaml"
    settings = yaml.safe_load(path.read_text())
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: expected a mapping of dotted keys to values")
    return [f"{key}={_hydra_value(value)}" for key, value in settings.items()]


def _hydra_value(value: object) -> str:
    """A YAML value written as a Hydra override value (lists as [a,b], mappings as {k:v}, booleans lower-case,
    null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def merge_overrides(*groups: list[str]) -> list[str]:
    """Overrides of several groups, a later group's value for a key replacing an earlier one's."""
    merged: dict[str, str] = {}
    for group in groups:
        for override in group:
            key, _, value = override.partition("=")
            merged.pop("+" + key.lstrip("+"), None)
            merged.pop(key.lstrip("+"), None)
            merged[key] = value
    return [f"{key}={value}" for key, value in merged.items()]


def cluster_overrides(name: str) -> list[str]:
    """``platform_overrides(name)`` for a job on a running cluster: without the ``ray.init`` arguments, which
    only a Ray instance the trainer starts itself takes (joining a cluster, ``ray.init`` refuses them)."""
    return [o for o in platform_overrides(name) if not o.lstrip("+").startswith("ray_kwargs.ray_init.")]
