"""Check a recipe against verl's config schema before it reaches a cluster.

Hydra merges a recipe file into verl's ``ppo_trainer`` without struct checks, so a misspelled knob
(``actor_rollout_ref.rollout.temprature``) composes silently and is ignored on the cluster. These checks
catch that locally: every leaf key the recipe sets must exist in verl's own config (or sit under one of
verl's free-form maps), the trainer mode must be one of ragym's with the settings it needs
(``ragym.rl.recipe.modes``), the sections verl turns into dataclasses must convert, and verl's
``validate_config`` must pass. ``ragym submit`` and the recipe tests both run them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import yaml
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from ragym.rl.core.dynamic_sampling import FILTER_SECTION
from ragym.rl.errors import UsageError
from ragym.rl.guards import GUARD_TYPES, GUARDS_SECTION, VAL_PREFIX, guard_metric_fields, read_guards
from ragym.rl.off_policy import correction_problems
from ragym.rl.recipe.compose import REWARD_KWARGS, REWARD_SEAM, load_recipe, recipe_settings, validate_recipe
from ragym.rl.recipe.counts import group_size_problems, switch_problems
from ragym.rl.recipe.modes import legacy_notice, mode_problems

logger = logging.getLogger(__name__)

OPEN_MAPS = (
    "reward.custom_reward_function.reward_kwargs",
    "ray_kwargs.ray_init",
    "actor_rollout_ref.rollout.custom",
)
"""Keys absent from verl's defaults that are allowed, with everything below them: the reward recipe verl
passes to ``compute_score`` (the rubric validates it), the keyword arguments verl passes to ``ray.init`` and the
rollout's extension map (``rollout.custom``: the hf rollout's ``partial_rollout``, checked in ``mode_problems``)."""

RAGYM_KEYS = (
    "ragym.demo.kb_preset",
    "ragym.demo.arch",
    "ragym.demo.kb_corpus_repeats",
    "ragym.r3g_demo.preset",
    "ragym.r3g_demo.corpus_repeats",
    "ragym.r3g_demo.weighted_after",
    "ragym.retrieval.url",
    "ragym.verl.trace_groups_per_step",
    "ragym.images.factor",
    "ragym.images.query_max_pixels",
    "ragym.images.candidate_max_pixels",
    "ragym.images.min_pixels",
    "ragym.images.cache_bytes",
    "ragym.turn_credit.step_weight",
    "ragym.outcome_metric",
    "ragym.off_policy_correction",
)
"""ragym's own top-level section, which verl never reads: local-engine knobs, the CPU demo's, the
retrieval service's address (``ragym.rl.recipe.retrieval``) and the image budget (``ragym.rl.recipe.images``)."""
VERL_DATA_KEYS = ("data.bad_rows",)
"""Keys ragym adds to verl's ``data`` section, read by ragym's dataset class (``ragym.rl.data.verl_dataset``)."""
RAGYM_SECTIONS = {
    # ``ragym train`` also checks that it read every ``ragym.engine`` key it was given.
    "ragym.engine": ("ragym.rl.engine.config", "EngineConfig"),
    "ragym.demo.policy": ("ragym.rl.tiny.policy", "TinyPolicyConfig"),
    "ragym.demo.warm_start": ("ragym.rl.tiny.warm_start", "WarmStartConfig"),
    "ragym.demo.warm_start_target": ("ragym.rl.tiny.warm_start", "WarmStartTarget"),
    "ragym.demo.copy_pretrain": ("ragym.rl.tiny.copy_pretrain", "CopyPretrainConfig"),
    "ragym.r3g_demo.policy": ("ragym.rl.tiny.policy", "TinyPolicyConfig"),
    "ragym.r3g_demo.warm_start": ("ragym.rl.tiny.warm_start", "WarmStartConfig"),
    # Retriever co-training (both engines).
    "ragym.cotrain": ("ragym.rl.cotrain.config", "CotrainConfig"),
    # Env settings the recipe gives every row's env (Rej_max): ragym.rl.recipe.env_settings.
    "ragym.env": ("ragym.rl.recipe.env_settings", "EnvSettings"),
    # Collapse guards: one section per guard.
    **{f"{GUARDS_SECTION}.{name}": ("ragym.rl.guards", kind.__name__) for name, kind in GUARD_TYPES.items()},
}
"""ragym sections read as a whole into a config dataclass: their keys are that dataclass's fields."""
SET_BY_RUN = {
    "ragym.demo.warm_start.seed": "the run's --seed",
    "ragym.demo.copy_pretrain.seed": "the run's --seed",
    "ragym.r3g_demo.warm_start.seed": "the run's --seed",
    "ragym.r3g_demo.warm_start.protocol_share": "the R3G task (0: its expert has no protocol-only episodes)",
}
"""Fields of a section's dataclass that the run sets itself, so a recipe may not (key -> what sets it)."""

DATACLASS_SECTIONS = (
    "actor_rollout_ref.actor",
    "actor_rollout_ref.rollout",
    # The reference policy's section holds keys verl pops before converting it; its engine section converts as is.
    "actor_rollout_ref.ref.fsdp_config",
    "algorithm",
    "distillation",
)
"""Sections verl converts to its config dataclasses (unknown fields fail there); the model section is
left out because converting it downloads the model's config."""


@functools.lru_cache(maxsize=1)
def _base_config() -> DictConfig:
    """verl's ``ppo_trainer`` with nothing on top, the reference for which keys exist (read-only)."""
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer")


RAGYM_KEY_TYPES = {"ragym.outcome_metric": (str, True), "ragym.turn_credit.step_weight": (float, False)}
"""Keys of ``RAGYM_KEYS`` (outside any section's dataclass) -> (their type, whether null is allowed), checked by
``section_type_problems``: otherwise ``ragym.outcome_metric=5`` went through and ``step_weight=abc`` failed only when
turn credit read it, after the model had loaded."""
OUTCOME_PREFIX = "reward/"
"""``ragym.outcome_metric`` names a reward term as ``compute_score`` logs it: ``reward/<term>``."""

_SCALARS = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
"""Field types ``section_type_problems`` checks, and how a problem names each."""


def _fits(value: object, kind: type) -> bool:
    """Whether ``value`` (from YAML or an override) is a ``kind``: an int is a float, a bool is neither number."""
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def section_type_problems(config: DictConfig) -> list[str]:
    """One line per value of a ``RAGYM_SECTIONS`` section whose type its dataclass field does not take (a
    number, an integer, true or false, a string, or null where the field allows None), and per ``RAGYM_KEY_TYPES``
    key of another type; fields of other types are left to their readers. ``ragym.demo.copy_pretrain.lr=abc`` was a
    TypeError minutes into a run."""
    import importlib
    import types
    import typing

    problems = []
    for section, (module, name) in RAGYM_SECTIONS.items():
        node = OmegaConf.select(config, section, default=None)
        if not isinstance(node, DictConfig):
            continue
        hints = typing.get_type_hints(getattr(importlib.import_module(module), name))
        values = OmegaConf.to_container(node, resolve=True)
        assert isinstance(values, dict)
        for key, value in values.items():
            hint = hints.get(str(key))
            args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
            kinds = [a for a in args if a is not type(None)]
            kind = kinds[0] if len(kinds) == 1 and kinds[0] in _SCALARS else None
            if kind is None or (value is None and type(None) in args) or _fits(value, kind):
                continue
            allowed = _SCALARS[kind] + (" or null" if type(None) in args else "")
            problems.append(f"{section}.{key}: {value!r} is not {allowed}")
    marker = object()
    for key, (kind, nullable) in RAGYM_KEY_TYPES.items():
        value = OmegaConf.select(config, key, default=marker)
        if value is marker or (value is None and nullable) or _fits(value, kind):
            continue
        problems.append(f"{key}: {value!r} is not {_SCALARS[kind]}" + (" or null" if nullable else ""))
    outcome = OmegaConf.select(config, "ragym.outcome_metric", default=None)
    if isinstance(outcome, str) and not outcome.startswith(OUTCOME_PREFIX):
        problems.append(
            f"ragym.outcome_metric: {outcome!r} is not a reward term's metric; name one as {OUTCOME_PREFIX}<term>"
        )
    return problems


def reward_metric_problems(config: DictConfig) -> list[str]:
    """One line for each ``reward/<term>`` metric a setting names (``ragym.outcome_metric``, a guard that is not off,
    dynamic sampling's ``algorithm.filter_groups.metric``) whose term ragym's rubric for the recipe does not have: a
    misspelt ``reward/outcom`` left the guard waiting for a metric no step logs (one warning, then never judged) and
    the filter's key unread until the first step. Nothing for a recipe whose reward is not ragym's ``compute_score``."""
    from ragym.rewards.verl import rubric_for

    kwargs = OmegaConf.select(config, REWARD_KWARGS, default=None)
    if (
        OmegaConf.select(config, "reward.custom_reward_function.path", default=None) != REWARD_SEAM
        or kwargs is None
    ):
        return []
    recipe, recipe_path = kwargs.get("recipe"), kwargs.get("recipe_path")
    if (recipe is None) == (recipe_path is None):
        return []  # load_recipe's check names this
    terms = [term.name for term in rubric_for(recipe, recipe_path, kwargs.get("overrides")).terms]
    named = {"ragym.outcome_metric": OmegaConf.select(config, "ragym.outcome_metric", default=None)}
    guards = OmegaConf.select(config, GUARDS_SECTION, default=None)
    section = cast(dict, OmegaConf.to_container(guards, resolve=True)) if guards is not None else None
    try:
        guard_configs = read_guards(section)
    except UsageError:
        guard_configs = {}  # check_recipe's own read of the guards names the problem
    for name, guard in guard_configs.items():
        if guard.action != "off":
            named |= {f"{GUARDS_SECTION}.{name}.{f}": getattr(guard, f) for f in guard_metric_fields(guard)}
    if OmegaConf.select(config, f"{FILTER_SECTION}.enable", default=False) is True:
        named[f"{FILTER_SECTION}.metric"] = OmegaConf.select(config, f"{FILTER_SECTION}.metric", default=None)
    problems = []
    for key, metric in named.items():
        term = str(metric).removeprefix(VAL_PREFIX).removeprefix(OUTCOME_PREFIX)
        if (
            isinstance(metric, str)
            and metric.removeprefix(VAL_PREFIX).startswith(OUTCOME_PREFIX)
            and term not in terms
        ):
            problems.append(
                f"{key}: {metric!r} names no term of the reward recipe (its terms: {', '.join(terms)}); "
                "no step logs it; name one of them"
                + (" (or null)" if key == "ragym.outcome_metric" else "")
                + (" or set the guard's action to off" if key.startswith(GUARDS_SECTION) else "")
            )
    return problems


def _leaf_paths(node: object, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every leaf (scalar, list or empty mapping) in a plain YAML mapping."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaf_paths(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip(".")


def _ragym_known(path: str) -> bool:
    """True when ``path`` (under ``ragym.``) is a knob some ragym command reads."""
    import dataclasses
    import importlib

    if path in RAGYM_KEYS:
        return True
    if path in SET_BY_RUN:
        return False
    for section, (module, name) in RAGYM_SECTIONS.items():
        if path.startswith(section + "."):
            fields = {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), name))}
            return path[len(section) + 1 :] in fields
    return False


def _dataclass_field(path: str, base: DictConfig) -> bool:
    """True when ``path`` is a field of the config dataclass verl converts its section, or a section within it,
    into, though verl's YAML leaves it out (``actor_rollout_ref.rollout.enable_sleep_mode``,
    ``actor_rollout_ref.actor.fsdp_config.mixed_precision``): the dataclass reads it."""
    import dataclasses

    from hydra.utils import get_class

    section, _, field = path.rpartition(".")
    if not any(section == known or section.startswith(known + ".") for known in DATACLASS_SECTIONS):
        return False
    target = OmegaConf.select(base, f"{section}._target_")
    return bool(target) and field in {f.name for f in dataclasses.fields(get_class(target))}


def _is_known(path: str, base: DictConfig) -> bool:
    """True when ``path`` exists in verl's config, in ragym's section or falls under a free-form map."""
    if any(path == open_map or path.startswith(open_map + ".") for open_map in OPEN_MAPS):
        return True
    if path in VERL_DATA_KEYS:
        return True
    if path == "ragym" or path.startswith("ragym."):
        return _ragym_known(path)
    if _dataclass_field(path, base):
        return True
    parts = path.split(".")
    node: object = base
    for depth, part in enumerate(parts):
        # The raw node: no interpolation is resolved, and a mandatory ``???`` value still counts as present.
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        child = node._get_node(part)
        assert child is not None  # the key is in node.keys()
        is_open = child._is_none() or (isinstance(child, DictConfig) and len(child) == 0)
        # An empty mapping or a null in verl's defaults is an open slot (engine_kwargs.vllm, override_config).
        if depth < len(parts) - 1 and is_open:
            return True
        node = child
    return True


def recipe_set_keys(recipe: str | Path, overrides: list[str] | None = None) -> list[str]:
    """The dotted keys the recipe's files (its own and its bases', not verl's defaults) and the overrides set, once
    each in order: every leaf of the files (an empty mapping is one), and each ``key=value`` override's key."""
    keys = list(_leaf_paths(recipe_settings(recipe)))
    keys += [item.split("=", 1)[0].lstrip("+~") for item in overrides or [] if "=" in item]
    return list(dict.fromkeys(keys))


def unknown_keys(
    recipe: str | Path, overrides: list[str] | None = None, set_keys: list[str] | None = None
) -> list[str]:
    """Keys the recipe's files (its own and its bases') or an override set that neither verl's ``ppo_trainer``
    config nor ragym has (``set_keys``: ``recipe_set_keys``' answer where the caller has it already)."""
    base = _base_config()
    keys = recipe_set_keys(recipe, overrides) if set_keys is None else set_keys
    return [key for key in keys if not _is_known(key, base)]


def uncommented_knobs(text: str) -> list[str]:
    """Knobs (keys whose value is not a mapping) without a ``#`` comment line directly above them.

    Returned as ``line N: dotted.key``. Section keys (a mapping follows) need no comment of their own;
    the ``hydra``/``defaults`` boilerplate is exempt.
    """
    lines = text.splitlines()
    root = yaml.compose(text)
    if not isinstance(root, yaml.MappingNode):
        raise ValueError("a recipe must be a YAML mapping")
    missing = []
    for key_node, dotted in _knob_nodes(root):
        if dotted.split(".")[0] in {"hydra", "defaults"}:
            continue
        above = next((line for line in reversed(lines[: key_node.start_mark.line]) if line.strip()), "")
        if not above.lstrip().startswith("#"):
            missing.append(f"line {key_node.start_mark.line + 1}: {dotted}")
    return missing


def _knob_nodes(node: yaml.MappingNode, prefix: str = "") -> Iterator[tuple[yaml.Node, str]]:
    """(key node, dotted key) for every knob below ``node``, recursing through nested mappings."""
    for key_node, value_node in node.value:
        dotted = f"{prefix}{key_node.value}"
        if isinstance(value_node, yaml.MappingNode) and value_node.value and not value_node.flow_style:
            yield from _knob_nodes(value_node, f"{dotted}.")
        else:
            yield key_node, dotted


@functools.cache
def _warn_once(message: str) -> None:
    """Log ``message`` once per process: a run checks its recipe up to three times (``verl_command``)."""
    logger.warning("%s", message)


def check_recipe(
    recipe: str | Path,
    overrides: list[str] | None = None,
    *,
    validate: bool = True,
    before_verl: Callable[[DictConfig], None] | None = None,
) -> DictConfig:
    """Compose ``recipe``, reject unknown keys, run ``before_verl`` on the composed config (checks that list every
    problem, ahead of verl's, which stop at the first), convert verl's dataclass sections and (``validate``) run
    verl's ``validate_config``, whose GPU-count rules only apply to jobs that verl itself runs."""
    from verl.utils.config import omega_conf_to_dataclass

    unknown = unknown_keys(recipe, overrides)
    if unknown:
        raise UsageError(
            f"recipe {recipe}: keys nothing reads (not in verl's ppo_trainer config nor ragym's section): "
            f"{', '.join(unknown)}; check the spelling"
        )
    config = load_recipe(recipe, overrides)
    problems = mode_problems(config) + correction_problems(config) + section_type_problems(config)
    problems += group_size_problems(config)  # verl takes a one-episode group's raw reward as its advantage
    problems += switch_problems(config)  # a word from the command line ("no") is a true value to both engines
    problems += reward_metric_problems(config)
    if problems:
        raise UsageError(f"recipe {recipe}: " + "\n".join(problems))
    # verl's trainer reads the guards at fit(), once its workers have loaded the model: an action "halt" failed there.
    guards = OmegaConf.select(config, GUARDS_SECTION, default=None)
    read_guards(cast(dict, OmegaConf.to_container(guards, resolve=True)) if guards is not None else None)
    notice = legacy_notice(config)
    if notice:
        _warn_once(f"recipe {recipe}: {notice}")
    if before_verl is not None:
        before_verl(config)
    for section in DATACLASS_SECTIONS:
        omega_conf_to_dataclass(OmegaConf.select(config, section))
    if validate:
        validate_recipe(config)
    return config
