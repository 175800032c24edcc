"""Load a ragym recipe: a verl Hydra YAML (``defaults: [ppo_trainer, base/..., _self_]``) composed on verl's config.

A recipe holds what differs from the bases it names (``recipes/base/``: what every recipe shares, verl's trainer,
the cluster's scale, the CPU demos', an env's task, LoRA), each merged in ``defaults`` order, the recipe last.
Both engines call ``load_recipe``: the local engine for its knobs, the cluster path through verl's own
``main_ppo`` (which composes the same file with ``--config-path/--config-name``, the recipe's folder, where the
bases are found). Composition here uses Hydra's compose API with verl's packaged config on the search path,
exactly as the recipe's own ``hydra.searchpath`` asks, so a recipe that composes here composes on the cluster.
"""

from __future__ import annotations

import copy
import os
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from ragym.rl.errors import UsageError

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
"""The repository's committed recipes."""
PACKAGE_ROOT = RECIPES_DIR.parent
"""The repository root: committed recipes name their reward recipes relative to it."""
REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs"
"""Where a training recipe holds its reward recipe (``recipe``) or the path of one (``recipe_path``)."""
REWARD_SEAM = "pkg://ragym.rewards.verl"
"""``reward.custom_reward_function.path`` of ragym's ``compute_score``, whose ``reward_kwargs`` are ragym's."""


def resolve_recipe_path(recipe: str | Path) -> Path:
    """A recipe given as a path, or as a name relative to ``recipes/`` (with or without ``.yaml``)."""
    path = Path(recipe)
    # An absolute path or one ending in .yaml names the same file more than once: each is looked at, and said, once.
    candidates = list(
        dict.fromkeys(
            [
                path,
                path.with_suffix(".yaml"),
                RECIPES_DIR / path,
                (RECIPES_DIR / path).with_suffix(".yaml"),
            ]
        )
    )
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise FileNotFoundError(f"recipe {recipe!s} not found (looked at {', '.join(map(str, candidates))})")


def load_recipe(recipe: str | Path, overrides: list[str] | None = None) -> DictConfig:
    """Compose ``recipe`` on verl's ``ppo_trainer`` config with Hydra ``overrides`` (``key=value`` strings)."""
    path = resolve_recipe_path(recipe)
    config = compose_recipe(path, overrides)
    OmegaConf.resolve(config)
    resolve_reward_recipe(config, path)
    return config


COMPOSITIONS_KEPT = 64
"""Compositions a process keeps (``compose_recipe``), least recently used dropped first: Hydra parses every YAML file
of verl's config tree again on each composition (about 0.37 s of CPU), a copy of a kept one takes 0.02 s, and a
command or a test suite composes the same recipe with the same overrides many times."""
STAMP_MAX_ENTRIES = 2000
"""Most folder entries ``sources_stamp`` looks at; a recipe in a larger folder is composed every time."""
_compositions: OrderedDict[tuple[Any, ...], DictConfig] = OrderedDict()


def sources_stamp(path: Path) -> tuple[tuple[str, int, int], ...] | None:
    """What a composition of ``path`` may read from disk, as (file, modification time, size) of every YAML file in
    its folder and its ``file://`` search-path folders, config-group subfolders included; None where those hold
    more than ``STAMP_MAX_ENTRIES`` entries or the recipe is not readable YAML (composed, not kept). verl's packaged
    configs (``pkg://``) are installed files, not edited under a running process.

    >>> sources_stamp(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml")[0][0].endswith(".yaml")
    True
    """
    try:
        roots = search_folders(path)
    except (yaml.YAMLError, AttributeError, OSError):
        return None
    stamp, seen = [], 0
    for root in roots:
        for folder, folders, files in os.walk(root):
            seen += len(folders) + len(files)
            if seen > STAMP_MAX_ENTRIES:
                return None
            for name in files:
                if name.endswith((".yaml", ".yml")):
                    file = os.path.join(folder, name)
                    stat = os.stat(file)
                    stamp.append((file, stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(stamp))


def compose_recipe(recipe: str | Path, overrides: list[str] | None = None) -> DictConfig:
    """``recipe`` composed with its Hydra defaults and ``overrides``, interpolations and paths left as written: a
    copy of a composition this process made before where no YAML file it may read has changed since
    (``sources_stamp``, ``COMPOSITIONS_KEPT``)."""
    path = resolve_recipe_path(recipe)
    stamp = sources_stamp(path)
    key = (str(path), tuple(overrides or []), os.getcwd(), stamp)
    if stamp is not None and key in _compositions:
        _compositions.move_to_end(key)
        return copy.deepcopy(_compositions[key])
    config = _compose(path, overrides)
    if stamp is not None:
        _compositions[key] = copy.deepcopy(config)
        while len(_compositions) > COMPOSITIONS_KEPT:
            _compositions.popitem(last=False)
    return config


def _compose(path: Path, overrides: list[str] | None) -> DictConfig:
    """Hydra's composition of the recipe at ``path`` with ``overrides``; an override of a key the recipe lacks is
    one line."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(path.parent), version_base=None):
        try:
            config = compose(config_name=path.stem, overrides=list(overrides or []))
        except ConfigCompositionException as err:
            missing = re.match(r"Could not override '([^']+)'", str(err))
            if missing is None:
                raise
            key, inline = missing.group(1), f"{REWARD_KWARGS}.recipe."
            hint = f"+{key}=... adds a new key"
            if key.startswith(inline):  # the recipe names a reward recipe file (recipe_path)
                hint = f"a reward recipe parameter is overridden with +{REWARD_KWARGS}.overrides.{key[len(inline) :]}=..."
            raise UsageError(
                f"override {key}: {path.name} has no such key; check the spelling ({hint})"
            ) from err
    return config


def recipe_files(recipe: str | Path) -> list[Path]:
    """The recipe's file and the bases it composes (``defaults`` entries found in its folder or a ``file://`` folder
    of its ``hydra.searchpath``, e.g. ``base/kbvqa``), in the order Hydra merges them: a later file's value wins;
    verl's configs (``ppo_trainer``) are left out."""
    path = resolve_recipe_path(recipe)
    return _files(search_folders(path), path, "")


def search_folders(path: Path) -> list[Path]:
    """The folders Hydra finds the recipe at ``path``'s bases in: its own, then its ``hydra.searchpath``'s
    ``file://`` folders (verl's ``pkg://`` configs are not files of a folder)."""
    searchpath = ((yaml.safe_load(path.read_text()) or {}).get("hydra") or {}).get("searchpath") or []
    return [
        path.parent,
        *(Path(entry[len("file://") :]) for entry in searchpath if entry.startswith("file://")),
    ]


def _files(folders: list[Path], path: Path, group: str) -> list[Path]:
    """``path`` after its defaults, depth first; ``/x`` names ``x`` in the folders, ``x`` in the entry's group."""
    files: list[Path] = []
    defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
    for entry in [*defaults, *([] if "_self_" in defaults else ["_self_"])]:
        if entry == "_self_":
            files.append(path)
            continue
        if not isinstance(entry, str):
            raise UsageError(
                f"{path}: defaults entry {entry!r}: a recipe names its bases as plain config names"
            )
        name = entry[1:] if entry.startswith("/") else f"{group}/{entry}".lstrip("/")
        found = [folder / f"{name}.yaml" for folder in folders if (folder / f"{name}.yaml").is_file()]
        if found:  # else one of verl's configs
            files += _files(folders, found[0], name.rpartition("/")[0])
    return files


def recipe_settings(recipe: str | Path) -> dict[str, Any]:
    """What the recipe's files set (its own and its bases', merged as Hydra merges them; no ``hydra``, ``defaults``
    or verl default): the keys a user wrote, for the checks of keys nothing reads."""
    merged: dict[str, Any] = {}
    for path in recipe_files(recipe):
        raw = yaml.safe_load(path.read_text()) or {}
        _merge(merged, {key: value for key, value in raw.items() if key not in {"hydra", "defaults"}})
    return merged


def _merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Deep-merge plain mapping ``other`` into ``into`` (``other`` wins).

    >>> into = {"a": {"b": 1, "c": 2}}
    >>> _merge(into, {"a": {"c": 3}, "d": 4})
    >>> into
    {'a': {'b': 1, 'c': 3}, 'd': 4}
    """
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def resolve_relative(value: str, recipe: Path) -> Path:
    """A path a recipe names: absolute as is; relative against the recipe's folder, then the package root,
    then the working directory (the first that exists), so commands work from any directory."""
    given = Path(value)
    if given.is_absolute():
        return given
    for base in (recipe.parent, PACKAGE_ROOT, Path.cwd()):
        if (base / given).exists():
            return (base / given).resolve()
    raise FileNotFoundError(
        f"{value} not found next to {recipe}, in {PACKAGE_ROOT} or in {Path.cwd()}; give an absolute path"
    )


def resolve_reward_recipe(config: DictConfig, recipe: Path) -> None:
    """Make the reward recipe path absolute and build its rubric, so a bad reward recipe fails at load time."""
    from ragym.rewards.verl import RECIPE_KWARGS, rubric_for

    kwargs = OmegaConf.select(config, REWARD_KWARGS)
    path = OmegaConf.select(config, "reward.custom_reward_function.path")
    if kwargs is None or path is None:
        return
    # compute_score refuses these too, but only at the first reward, after the model has loaded.
    unknown = sorted(set(map(str, kwargs)) - set(RECIPE_KWARGS))
    if path == REWARD_SEAM and unknown:
        raise UsageError(
            f"{recipe}: {REWARD_KWARGS}: unknown key(s) {unknown}; ragym's compute_score takes "
            f"{', '.join(RECIPE_KWARGS)}"
        )
    given = [key for key in ("recipe", "recipe_path") if kwargs.get(key) is not None]
    if len(given) == 2 or (path == REWARD_SEAM and not given):
        raise UsageError(
            f"{recipe}: {REWARD_KWARGS} needs exactly one of recipe and recipe_path (null the other: a base may "
            f"set recipe_path), got {' and '.join(given) or 'neither'}"
        )
    try:
        # ``overrides`` (``+reward...reward_kwargs.overrides.terms.T.params.P=V``) are merged in and checked too.
        if kwargs.get("recipe_path") is not None:
            kwargs.recipe_path = str(resolve_relative(str(kwargs.recipe_path), recipe))
            rubric_for(recipe_path=kwargs.recipe_path, overrides=kwargs.get("overrides"))
        elif kwargs.get("recipe") is not None:
            rubric_for(recipe=kwargs.recipe, overrides=kwargs.get("overrides"))
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise UsageError(f"{recipe}: reward recipe ({REWARD_KWARGS}): {err}") from err


def validate_recipe(config: DictConfig) -> None:
    """Run verl's own config validation (batch divisibility, micro-batch rules...) on a composed recipe."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(
        config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
