"""The rubric: named reward terms with weights and parameters from a reward recipe, validated at load.

A reward recipe (YAML, its own file or inside a training recipe at
``reward.custom_reward_function.reward_kwargs.recipe``)::

    terms:
      outcome: {weight: 1.0}
      format: {weight: 1.0, params: {mode: binary, on_truncated: score}}
      verification: {weight: 1.0, params: {delta: 0.2}}
      recall_at_5: {weight: 0.0, reward: retrieval_recall, params: {k: 5}}   # logged, not rewarded
      brevity: {weight: 0.1, reward: "my_pkg.rewards:brevity"}              # custom reward by dotted path

Each term's key is its log name (``reward/<key>``); ``reward`` names the registered reward (default: the
key) or a ``module:function`` path; ``data_sources`` optionally limits the term to some data sources.
The total is the weighted sum of the terms that apply; terms returning None are skipped and counted.
"""

from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ragym.envs.events import events_of
from ragym.rewards.episode import Episode
from ragym.rewards.registry import RewardFn, get_reward, reward_params, validate_params

_RECIPE_KEYS = {"terms", "name", "description"}
_TERM_KEYS = {"weight", "reward", "params", "data_sources"}
_KWARGS_AT = "reward.custom_reward_function.reward_kwargs"
_REPO = Path(__file__).resolve().parents[1]
"""The repository root, which the committed training recipes name their reward recipes from."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, except that a key given twice in one mapping is an error: safe_load keeps the
    last one silently, so a term listed twice lost its first entry (its weight, its params)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            if key.value in seen:
                raise ValueError(
                    f"line {key.start_mark.line + 1}: {key.value!r} is given twice in one mapping"
                )
            seen.add(key.value)
        return super().construct_mapping(node, deep)


class RewardError(RuntimeError):
    """A reward term failed or returned something other than a finite number or None."""


@dataclass(frozen=True)
class Term:
    """One weighted reward term of a rubric."""

    name: str
    """Log name: the breakdown key and ``reward/<name>`` in metrics."""
    reward: str
    """Registered reward name or ``module:function`` path."""
    weight: float
    """Multiplier of the term in the total."""
    params: dict[str, Any]
    """Keyword arguments passed to the reward function."""
    fn: RewardFn = field(repr=False)
    """The resolved reward function."""
    data_sources: frozenset[str] | None = None
    """Data sources the term applies to (None: all); elsewhere it is skipped like a None value."""


@dataclass(frozen=True)
class RubricResult:
    """The total reward of one episode and every term's unweighted value (None: did not apply)."""

    total: float
    """Weighted sum of the terms that applied."""
    breakdown: dict[str, float | None]
    """Unweighted value of each term, by term name."""

    @property
    def skipped(self) -> tuple[str, ...]:
        """Names of the terms that returned None."""
        return tuple(name for name, value in self.breakdown.items() if value is None)

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """``{prefix + name: value}`` with skipped terms as 0.0 (verl needs every key on every sample)."""
        return {prefix + name: 0.0 if value is None else value for name, value in self.breakdown.items()}


def plain_config(obj: Any) -> Any:
    """OmegaConf containers (what verl passes) as plain dicts and lists; anything else unchanged."""
    if type(obj).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(obj, resolve=True)
    return obj


def resolve_reward(spec: str, label: str) -> tuple[RewardFn, type | None]:
    """The function (and params dataclass) for a registered name or a ``module:function`` path."""
    if ":" not in spec:
        try:
            return get_reward(spec), reward_params(spec)
        except KeyError as err:
            raise ValueError(f"{label}: {err.args[0]}") from None
    module_name, _, attr = spec.partition(":")
    try:
        fn: RewardFn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{label}: cannot import custom reward {spec!r}: {err}") from err
    if not callable(fn):
        raise ValueError(f"{label}: custom reward {spec!r} is not callable")
    return fn, None


def _build_term(name: str, spec: Any, where: str) -> Term:
    """One validated term from its recipe entry."""
    label = f"{where}: term {name!r}"
    if not isinstance(spec, Mapping):
        raise ValueError(f"{label} must be a mapping with weight/reward/params, got {spec!r}")
    unknown = sorted(set(spec) - _TERM_KEYS)
    if unknown:
        raise ValueError(f"{label}: unknown key(s) {unknown}; allowed: {sorted(_TERM_KEYS)}")
    weight = spec.get("weight")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise ValueError(f"{label}: weight must be a finite number, got {weight!r}")
    reward = str(spec.get("reward", name))
    params = dict(spec.get("params") or {})
    fn, params_cls = resolve_reward(reward, label)
    validate_params(f"{label} (reward {reward!r})", fn, params, params_cls)
    sources = spec.get("data_sources")
    if sources is not None and (
        not isinstance(sources, list) or not all(isinstance(s, str) for s in sources)
    ):
        raise ValueError(f"{label}: data_sources must be a list of strings, got {sources!r}")
    return Term(name, reward, float(weight), params, fn, frozenset(sources) if sources is not None else None)


def load_recipe(recipe: Mapping[str, Any] | str | Path) -> tuple[dict[str, Any], str]:
    """The reward recipe dict from a dict, a reward-recipe YAML, or a training recipe YAML; plus its origin."""
    if isinstance(recipe, (str, Path)):
        path = Path(recipe)
        if not path.is_file():
            raise FileNotFoundError(f"reward recipe {path} does not exist")
        try:
            data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        where = str(path)
        if isinstance(data, Mapping) and "terms" not in data and ("reward" in data or "defaults" in data):
            # A training recipe: the reward recipe sits in the custom reward function's kwargs.
            kwargs = ((data.get("reward") or {}).get("custom_reward_function") or {}).get(
                "reward_kwargs"
            ) or {}
            if "recipe" in kwargs:
                inner, where = load_recipe(kwargs["recipe"])[0], f"{where}:{_KWARGS_AT}.recipe"
            elif "recipe_path" in kwargs:
                # Where the training commands look (ragym.rl.recipe.compose.resolve_relative): the recipe's folder, the
                # repository (the committed recipes name theirs from it), the working directory.
                tried = [
                    path.parent / kwargs["recipe_path"],
                    _REPO / kwargs["recipe_path"],
                    Path(kwargs["recipe_path"]),
                ]
                inner, where = load_recipe(next((t for t in tried if t.is_file()), tried[0]))
            else:
                inner = None
            if inner is not None:
                return apply_overrides(inner, kwargs.get("overrides"), where), where
            bases = (
                "; its bases (defaults) may set one: give that reward recipe file"
                if "defaults" in data
                else ""
            )
            raise ValueError(
                f"{where}: training recipe has no reward.custom_reward_function.reward_kwargs.recipe{bases}"
            )
        recipe = data
    else:
        where = "reward recipe"
    recipe = plain_config(recipe)
    if not isinstance(recipe, Mapping):
        raise ValueError(
            f"{where}: a reward recipe must be a mapping with 'terms', got {type(recipe).__name__}"
        )
    return dict(recipe), where


def apply_overrides(recipe: Mapping[str, Any], overrides: Any, where: str) -> dict[str, Any]:
    """``recipe`` with ``overrides`` (``reward_kwargs.overrides``, nested like the recipe) merged in: mappings
    merge, anything else replaces. Overrides may only change terms the recipe has (a misspelled term would
    otherwise become a new term); the rubric then validates the result (keys, weights, params).

    >>> apply_overrides({"terms": {"v": {"weight": 1.0, "params": {"delta": 0.2}}}},
    ...                 {"terms": {"v": {"params": {"delta": 0.3}}}}, "r")["terms"]["v"]
    {'weight': 1.0, 'params': {'delta': 0.3}}
    """
    overrides = plain_config(overrides)
    if overrides is None:
        return dict(recipe)
    if not isinstance(overrides, Mapping):
        raise ValueError(f"{where}: reward_kwargs.overrides must be a mapping, got {overrides!r}")
    have = recipe.get("terms")
    have = have if isinstance(have, Mapping) else {}
    terms = overrides.get("terms") or {}
    unknown = sorted(set(terms) - set(have)) if isinstance(terms, Mapping) else [repr(terms)]
    if unknown:
        raise ValueError(
            f"{where}: reward_kwargs.overrides names term(s) {unknown} the reward recipe does not have; "
            f"it has {sorted(have)}"
        )
    return _merge(recipe, overrides)


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        merged[key] = (
            _merge(below, value) if isinstance(below, Mapping) and isinstance(value, Mapping) else value
        )
    return merged


class Rubric:
    """Combines named reward terms into a total and a per-term breakdown."""

    def __init__(self, terms: list[Term], name: str = "") -> None:
        if not terms:
            raise ValueError("a rubric needs at least one term")
        self.terms = tuple(terms)
        self.name = name

    @classmethod
    def from_recipe(cls, recipe: Mapping[str, Any] | str | Path) -> Rubric:
        """Build and validate a rubric; unknown rewards, keys or parameters are errors that name them."""
        data, where = load_recipe(recipe)
        unknown = sorted(set(data) - _RECIPE_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_RECIPE_KEYS)}")
        terms = data.get("terms")
        if not isinstance(terms, Mapping) or not terms:
            raise ValueError(f"{where}: 'terms' must be a non-empty mapping of term name -> spec")
        return cls(
            [_build_term(str(name), spec, where) for name, spec in terms.items()], str(data.get("name", ""))
        )

    def score(self, episode: Episode) -> RubricResult:
        """Total and breakdown for one episode; a term that fails or returns NaN/inf raises ``RewardError``.

        An episode the env ended by raising (an ``episode_error`` event) skips every term, so its total is
        0.0: its events stop wherever the env failed, and no term's value would mean anything.
        """
        if events_of(episode.events, "episode_error"):
            return RubricResult(0.0, {term.name: None for term in self.terms})
        total, breakdown = 0.0, {}
        for term in self.terms:
            if term.data_sources is not None and episode.data_source not in term.data_sources:
                breakdown[term.name] = None
                continue
            try:
                value = term.fn(episode, **term.params)
            except Exception as err:
                raise RewardError(
                    f"reward term {term.name!r} ({term.reward}) failed on a "
                    f"{episode.data_source!r} episode: {err}"
                ) from err
            if value is None:
                breakdown[term.name] = None
                continue
            if not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise RewardError(
                    f"reward term {term.name!r} ({term.reward}) returned {value!r}, "
                    "not a finite number or None"
                )
            breakdown[term.name] = float(value)
            total += term.weight * float(value)
        return RubricResult(total, breakdown)

    def __repr__(self) -> str:
        terms = ", ".join(f"{t.name}={t.reward}x{t.weight:g}" for t in self.terms)
        return f"Rubric({self.name or 'unnamed'}: {terms})"
