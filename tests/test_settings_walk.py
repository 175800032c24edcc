"""Every setting reaches its use, checked by a walk (issue #51 item 1; STYLE.md habit 11).

Env configs, behaviourally: for every field of every registered env's config dataclass, the walk derives other
valid values from the default (bool: its negation; int and float: a few values around it; other types: the
``ALTERNATES`` table), builds the env both ways on the built-in tiny data, plays the same scripted episodes (the
env's expert, as ``ragym rollout --policy expert`` does, and its longest episode, as ``ragym budget`` does) with
the same seed, and requires that something observable differs: an observation's text or images, an event, a
reward, the info, where the episode ends, the system prompt or the spaces. Where a field acts only beside other
settings (a last-turn notice needs an episode that reaches its last turn), ``WITH`` sets them on both sides. A field
that changes nothing at this size must be in ``NO_EFFECT_AT_THIS_SIZE`` with the reason; a new field in neither
fails the suite, naming it, and a listed field that does change the episodes fails it too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from typing import Any

import gymnasium
import numpy as np
import pytest

from ragym import envs
from ragym.envs.hooks import env_hooks, load_object
from ragym.envs.r3g.corpus import JudgeWeights
from ragym.envs.registry import make_env, registered_envs
from ragym.envs.scripted import run_episode

SEED = 0
EXPERT_SEEDS = (0, 1, 0)
"""Expert episodes played in turn on one env: what an episode leaves behind (MEMORA's memory) shows in the next."""
LONGEST_SEEDS = (0, 1)
"""Longest episodes played in turn on another env (every action kind the env has, at its most)."""

# KB-VQA's 56 x 56 images fit every budget above the default floor: lower it so a budget can shrink them to 28 x 28.
SMALL = {"image_min_pixels": 784}
R3G_SMALL = {"image_factor": 14, "image_min_pixels": 196}  # R3G's 24 x 24 images: 14 x 14 blocks, down to one
PAGE_CAP = {"candidate_max_pixels": 50176}  # DocMemo's 320 x 240 pages, capped below their size

ALTERNATES: dict[str, tuple[Any, ...]] = {
    "KBVQAConfig.query_max_pixels": (784,),
    "KBVQAConfig.candidate_max_pixels": (784,),
    "KBVQAConfig.image_min_pixels": (1568,),
    "KBVQAConfig.image_factor": (32,),
    "KBVQAConfig.text_retriever": ("bm25", "dense"),
    "KBVQAConfig.candidate_source": ("live",),
    "KBVQAConfig.index_kind": ("hnsw", "ivf", "flat"),
    "R3GConfig.query_max_pixels": (196,),
    "R3GConfig.candidate_max_pixels": (196,),
    "R3GConfig.image_min_pixels": (392,),
    "R3GConfig.image_factor": (16,),
    "R3GConfig.rerank": ("stage1", "stage2", "none"),
    "R3GConfig.weights": (JudgeWeights(r=0.45, t=0.35, a=0.2), JudgeWeights(r=1.0, t=0.0, a=0.0)),
    "DocMemoConfig.candidate_max_pixels": (50176,),
    "DocMemoConfig.image_min_pixels": (50176,),
    "DocMemoConfig.image_factor": (32,),
    "MemoraConfig.own_query_similarity": (0.01, 0.1, 0.3),
}
"""``Config.field`` -> the values to try instead of the derived ones (enums, composite values, pixel budgets
sized to the tiny data's images)."""

WITH: dict[str, dict[str, Any]] = {
    "KBVQAConfig.query_max_pixels": SMALL,
    "KBVQAConfig.candidate_max_pixels": SMALL,
    "KBVQAConfig.image_min_pixels": {**SMALL, "query_max_pixels": 1568, "candidate_max_pixels": 1568},
    "KBVQAConfig.image_factor": {**SMALL, "query_max_pixels": 1568, "candidate_max_pixels": 1568},
    "KBVQAConfig.allow_reject": {"max_rejections": 0},  # no Reject action needs no rejections
    "KBVQAConfig.last_turn_notice": {"max_turns": 4},
    "KBVQAConfig.index_kind": {"candidate_source": "live"},  # the index serves live search only
    "R3GConfig.query_max_pixels": R3G_SMALL,
    "R3GConfig.candidate_max_pixels": R3G_SMALL,
    "R3GConfig.image_min_pixels": {**R3G_SMALL, "query_max_pixels": 392, "candidate_max_pixels": 392},
    "R3GConfig.image_factor": {**R3G_SMALL, "query_max_pixels": 392, "candidate_max_pixels": 392},
    "R3GConfig.last_turn_notice": {"max_turns": 3},
    "DocMemoConfig.image_min_pixels": PAGE_CAP,
    "DocMemoConfig.image_factor": PAGE_CAP,
    "DocMemoConfig.belief_memory": {"belief_update": False},  # no belief memory needs no belief updates
}
"""``Config.field`` -> other settings both sides of the comparison share, where the field acts only beside them
(a turn notice needs an episode that reaches its last turn; a pixel budget, images larger than it)."""

_DATA = "selects the data; the walk plays the built-in tiny data, and another preset builds a larger one (minutes)"
_NO_IMAGES = "the built-in synthetic domain has no query images (tests/envs/memora/ use one with an image)"
NO_EFFECT_AT_THIS_SIZE: dict[str, str] = {
    "DocMemo-v0.query_max_pixels": "DocMemo shows no query image (the question is text); every env's config shares "
    "the image budget (EnvConfig) so that the recipe's ragym.images fills it in each",
    "DocMemo-v0.store_root": _DATA,
    "DocMemo-v0.crop_dense_pages": "the scripted episodes read no table or chart page of the synthetic report; "
    "tests/envs/docmemo/test_docmemo.py crops one",
    "DocMemo-v0.encoder": "the visual encoder needs a local CLIP-style model, and none is on a test machine",
    "DocMemo-v0.visual_model_path": "read by the visual encoder only (see encoder)",
    "DocMemo-v0.device": "the text encoder gives the same vectors on any device; a test machine has only the CPU",
    **{f"{env}.{name}": _DATA for env in ("KBVQA-v0", "KBVQA-Demo-v0") for name in ("kb_dir", "preset")},
    **{
        f"{env}.max_text_queries": "the scripted episodes search text with one name (the tiny rows have one query "
        "image), within every valid bound; tests/envs/kbvqa/test_kbvqa_env.py refuses six at the default five"
        for env in ("KBVQA-v0", "KBVQA-Demo-v0")
    },
    **{
        f"{env}.text_retriever": "the tiny KB has no passage vectors: auto is bm25, and dense is refused"
        for env in ("KBVQA-v0", "KBVQA-Demo-v0")
    },
    **{
        f"{env}.{name}": "the tiny KB's precomputed candidate lists are its exact (flat) search's results, which "
        "every index finds on a KB this small; tests/envs/serving/ search live"
        for env in ("KBVQA-v0", "KBVQA-Demo-v0")
        for name in ("candidate_source", "index_kind")
    },
    **{
        f"MEMORA-v0.{name}": _NO_IMAGES
        for name in (
            "query_max_pixels",
            "image_min_pixels",
            "image_factor",
            "show_image",
            "describe_in_first_stage",
        )
    },
    "MEMORA-v0.candidate_max_pixels": "MEMORA shows no candidate image (documents are text); every env's config "
    "shares the image budget (EnvConfig) so that the recipe's ragym.images fills it in each",
    "MEMORA-v0.k_min": "the scripted episodes decompose into K_max factors, within every valid K_min (<= K_max); "
    "tests/envs/memora/test_memora.py refuses a decomposition under it",
    "MEMORA-v0.max_pool": "the synthetic domain's subqueries never fill a pool of the smallest valid cap (K_0 = 50)",
    "MEMORA-v0.memory_dir": "where memory persists between env instances; each walk episode plays on one "
    "instance (tests/envs/memora/test_memora_memory.py reads it back from another)",
    "MEMORA-v0.corpus_path": _DATA,
    "MEMORA-v0.domain": "read only when reset options name no domain; the synthetic episodes name theirs",
    "R3G-v0.task_dir": _DATA,
    "R3G-v0.preset": _DATA,
    "R3G-v0.pool_source": "benchmark pools are a row's retrieved_images, which the synthetic rows do not carry "
    "(tests/envs/r3g/test_r3g_env.py plays one)",
    "R3G-v0.encoder": "an object, never a row's setting; every synthetic query has a stored feature, so it encodes "
    "none",
}
"""``EnvId.field`` -> why changing it changes nothing observable on the tiny data and the scripted episodes."""


def config_class(env_id: str) -> type:
    """The config dataclass ``env_id``'s constructor takes."""
    hint = typing.get_type_hints(load_object(registered_envs()[env_id]).__init__)["config"]
    options = typing.get_args(hint) or (hint,)
    return next(option for option in options if isinstance(option, type) and dataclasses.is_dataclass(option))


def config_fields(env_id: str) -> list[dataclasses.Field]:
    """The fields of ``env_id``'s config, in declaration order."""
    return list(dataclasses.fields(config_class(env_id)))


def derived_values(cls: type, field: dataclasses.Field) -> list[Any]:
    """Other values than the default to try for ``field``, valid ones first-come (the config refuses the rest)."""
    default = field.default
    if f"{cls.__name__}.{field.name}" in ALTERNATES:
        return list(ALTERNATES[f"{cls.__name__}.{field.name}"])
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, int):
        return [
            v
            for v in dict.fromkeys([default - 1, default + 1, 1, 0, default * 2, default // 2, default // 64])
            if v != default
        ]
    if isinstance(default, float):
        return [v for v in dict.fromkeys([default * 0.5, default * 2, 0.0, 1.0, 0.95]) if v != default]
    return []


def _image_key(image: Any) -> tuple[Any, ...]:
    array = np.asarray(image)
    return (array.shape, hashlib.sha1(array.tobytes()).hexdigest())


class Recorder(gymnasium.Wrapper):
    """Records every observation, reward, end and info an episode shows, in a form that compares by value."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.trace: list[Any] = []

    def _record(self, obs: Any, info: dict[str, Any], *rest: Any) -> None:
        images = [_image_key(image) for image in obs.get("images", ())]
        self.trace.append((obs["text"], images, json.dumps(info, sort_keys=True, default=repr), rest))

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._record(obs, info)
        return obs, info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._record(obs, info, reward, terminated, truncated)
        return obs, reward, terminated, truncated, info


def surface(env: Any) -> tuple[str, str, str]:
    """What the env shows before any episode: its system prompt and its spaces (bounds on turns and observations)."""
    return (env.system_prompt, repr(env.observation_space), repr(env.action_space))


def play(env_id: str, **overrides: Any) -> list[Any]:
    """What the expert's episode and the longest episode show on ``env_id`` built with ``overrides``."""
    hooks = env_hooks(env_id)
    expert = Recorder(make_env(env_id, **overrides))
    traces: list[Any] = [surface(expert.unwrapped)]
    assert hooks.expert is not None and hooks.longest_episode is not None, (
        f"{env_id} has no expert or longest"
    )
    for seed in EXPERT_SEEDS:
        run_episode(expert, hooks.expert(expert.unwrapped, seed), seed)
    traces.append(expert.trace)
    longest = Recorder(make_env(env_id, **overrides))
    for seed in LONGEST_SEEDS:
        hooks.longest_episode(longest, None, seed)
    traces.append(longest.trace)
    return traces


def changed_by(env_id: str, field: dataclasses.Field, baseline: list[Any]) -> str | None:
    """The first value of ``field`` that changes what the episodes show (None: none did, or none was valid)."""
    shared = WITH.get(f"{config_class(env_id).__name__}.{field.name}", {})
    if shared:
        baseline = play(env_id, **shared)
    for value in derived_values(config_class(env_id), field):
        try:
            traces = play(env_id, **{**shared, field.name: value})
        except ValueError:
            continue  # the config refuses this value; another may be valid
        if traces != baseline:
            return repr(value)
    return None


ENV_IDS = sorted(envs.registered_envs())


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_env_setting_changes_what_an_episode_shows(env_id: str) -> None:
    baseline = play(env_id)
    assert play(env_id) == baseline, f"{env_id}: the same episodes differ with the same settings and seed"
    silent, stale = [], []
    for field in config_fields(env_id):
        key = f"{env_id}.{field.name}"
        effect = changed_by(env_id, field, baseline)
        if effect is None and key not in NO_EFFECT_AT_THIS_SIZE:
            silent.append(f"{key} (tried {derived_values(config_class(env_id), field)!r})")
        if effect is not None and key in NO_EFFECT_AT_THIS_SIZE:
            stale.append(f"{key} (changes with {effect})")
    assert not silent, (
        "settings that change nothing the episodes show; make them reach their use, or list them in "
        f"NO_EFFECT_AT_THIS_SIZE with the reason: {silent}"
    )
    assert not stale, f"listed in NO_EFFECT_AT_THIS_SIZE but they do change the episodes: {stale}"


def test_every_listed_setting_is_a_real_field() -> None:
    fields = {f"{env_id}.{f.name}" for env_id in ENV_IDS for f in config_fields(env_id)}
    classes = {
        f"{config_class(env_id).__name__}.{f.name}" for env_id in ENV_IDS for f in config_fields(env_id)
    }
    assert not set(NO_EFFECT_AT_THIS_SIZE) - fields, "NO_EFFECT_AT_THIS_SIZE names no such field"
    assert not set(ALTERNATES) - classes, "ALTERNATES names no such field"
    assert not set(WITH) - classes, "WITH names no such field"
