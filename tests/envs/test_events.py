"""The shared event constructors and the kind registry: the schema is checked where an event is made."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from ragym.envs import events as ev
from ragym.envs.registry import env_packages

SHARED_KINDS = {
    "action",
    "format_error",
    "protocol_violation",
    "truncated",
    "answer",
    "retrieval_error",
    "episode_error",
    "observation_cut",
}

BAD_EVENTS = [
    ("bool turn", lambda: ev.action(True, "answer", True), TypeError),
    ("turn below -1", lambda: ev.format_error(-2, "no_action"), ValueError),
    ("well_formed not bool", lambda: ev.action(0, "answer", 1), TypeError),
    ("violation field unknown", lambda: ev.protocol_violation(0, "x", page=3), TypeError),
    ("violation pages not ints", lambda: ev.protocol_violation(0, "x", pages=[1.0]), TypeError),
    ("retrieval_error reason not str", lambda: ev.retrieval_error(0, "bm25", None, "x"), TypeError),
    ("episode_error stage unknown", lambda: ev.episode_error(0, "render", "x"), ValueError),
    ("episode_error error not str", lambda: ev.episode_error(0, "step", None), TypeError),
    ("truncation size negative", lambda: ev.truncated(0, "max_response_length", -1, 0), ValueError),
    ("cut part unknown", lambda: ev.observation_cut(0, "middle", 5), ValueError),
    ("cut of no characters", lambda: ev.observation_cut(0, "tail", 0), ValueError),
    ("memory cut without rounds", lambda: ev.observation_cut(0, "memory", 5), ValueError),
    ("rounds on a tail cut", lambda: ev.observation_cut(0, "tail", 5, [0]), ValueError),
]


@pytest.mark.parametrize(("make", "error"), [c[1:] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS])
def test_bad_fields_raise_naming_the_event(make, error) -> None:
    with pytest.raises(error, match="event"):
        make()


def test_shared_constructors_make_their_kinds_as_plain_json() -> None:
    made = [
        ev.action(np.int64(0), "answer", True),
        ev.format_error(0, "x"),
        ev.protocol_violation(0, "x", pages=[1]),
        ev.truncated(0, "max_turns"),
        ev.answer(0, "y"),
        ev.retrieval_error(0, "bm25", "timeout", "no answer"),
        ev.episode_error(-1, "reset", "FileNotFoundError: q.jpg"),
        ev.observation_cut(1, "memory", 12, [0]),
    ]
    assert {e["type"] for e in made} == SHARED_KINDS
    assert json.loads(json.dumps(made)) == made and type(made[0]["turn"]) is int
    sized = ev.truncated(3, "max_response_length", observation_tokens=900, visual_tokens=None)
    assert (sized["observation_tokens"], sized["visual_tokens"]) == (900, 0)


def test_the_registry_holds_the_shared_kinds_and_each_env_packages_own() -> None:
    packages = env_packages()
    assert {"ragym.envs.kbvqa", "ragym.envs.docmemo", "ragym.envs.memora", "ragym.envs.r3g"} <= set(packages)
    own = [set(importlib.import_module(f"{package}.events").KINDS) for package in packages]
    assert ev.registered_event_kinds() == SHARED_KINDS.union(*own)
    assert not any(a & b for i, a in enumerate(own) for b in own[i + 1 :])  # no kind is two envs'


def test_a_kind_registered_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"event kinds \['answer'\] are already registered"):
        ev.register_event_kinds("brand_new_kind_never_kept", "answer")
    assert "brand_new_kind_never_kept" not in ev.registered_event_kinds()  # nothing of a refused call is kept
