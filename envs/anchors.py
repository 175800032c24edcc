"""Anchor states: what each env says a policy turn faced, so turn-level credit compares like with like.

Turn-level credit (``ragym.rl.credit``) compares a turn's step return only with turns of other episodes of the same
GRPO group that faced the same anchor. An anchor is a function of the events before the turn (never of the
turn's own action), written as a JSON string. Each env registers one function ``events -> {turn: anchor}``;
turns it leaves out have no anchor and get the episode advantage only. Turn 0 never has one: every episode of
a group starts from the same task, so the episode advantage is already that state's comparison.

- ``KBVQA-v0`` / ``KBVQA-Demo-v0``: the query image and the candidate batch shown (image, batch id, candidates),
  for the turn right after the batch was served: the turn that verifies it.
- ``DocMemo-v0``: the round and the view shown (``candidates`` before a selection, ``evidence`` before an
  answer or refinement) of the row's document (the group shares the document).
- ``R3G-v0``: the coarse pool shown to the judge turn; the evidence shown to the answer turn.
- ``MEMORA-v0``: the candidate pool (first stage plus every subquery's additions, as a set) and the kinds
  of the well-formed actions taken so far.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ragym.envs.events import Event, events_of

AnchorFn = Callable[[list[Event]], dict[int, str]]
"""``fn(events) -> {turn: anchor}`` for the turns that faced a declared anchor state."""

_ANCHORS: dict[str, AnchorFn] = {}


def register_anchors(*env_ids: str) -> Callable[[AnchorFn], AnchorFn]:
    """Decorator: the anchor function of ``env_ids`` (one per env id)."""

    def decorator(fn: AnchorFn) -> AnchorFn:
        for env_id in env_ids:
            if env_id in _ANCHORS:
                raise ValueError(
                    f"anchors of {env_id!r} are already registered ({_ANCHORS[env_id].__name__})"
                )
            _ANCHORS[env_id] = fn
        return fn

    return decorator


def turn_anchors(env_id: str, events: list[Event]) -> dict[int, str]:
    """{turn: anchor} of one episode of ``env_id`` (turn 0 and turns without a declared anchor left out)."""
    if env_id not in _ANCHORS:
        raise KeyError(f"no anchor states registered for {env_id!r}; registered: {sorted(_ANCHORS)}")
    if events_of(events, "episode_error"):
        return {}  # the env raised: its events stop there and no turn of the episode trains
    return {turn: anchor for turn, anchor in _ANCHORS[env_id](events).items() if turn >= 1}


def _key(*parts: Any) -> str:
    return json.dumps(parts, separators=(",", ":"))


@register_anchors("KBVQA-v0", "KBVQA-Demo-v0")
def kbvqa_anchors(events: list[Event]) -> dict[int, str]:
    """The turn after a ``search_image`` event faced that batch: (image, batch id, candidates).

    >>> from envs import events as ev
    >>> kbvqa_anchors([ev.search_image(0, 1, 0, ["e1", "e2"], "e2", 0)])
    {1: '["batch",1,0,["e1","e2"]]'}
    """
    return {
        e["turn"] + 1: _key("batch", e["image"], e["batch_id"], e["candidates"])
        for e in events_of(events, "search_image")
    }


@register_anchors("DocMemo-v0")
def docmemo_anchors(events: list[Event]) -> dict[int, str]:
    """The turn after a ``candidates`` (or ``evidence``) event faced that round's candidate (evidence) view."""
    anchors = {}
    for event in events:
        if event["type"] in ("candidates", "evidence"):
            anchors[event["turn"] + 1] = _key(event["type"], event["round"])
    return anchors


@register_anchors("R3G-v0")
def r3g_anchors(events: list[Event]) -> dict[int, str]:
    """The judge turn faced the coarse pool; the answer turn faced the selected evidence."""
    anchors = {}
    for event in events:  # in order: without a judge turn the evidence (shown last) is what the next turn saw
        if event["type"] == "coarse_retrieval":
            anchors[event["turn"] + 1] = _key("pool", event["pool"])
        elif event["type"] == "evidence_selected":
            anchors[event["turn"] + 1] = _key("evidence", event["selected"])
    return anchors


@register_anchors("MEMORA-v0")
def memora_anchors(events: list[Event]) -> dict[int, str]:
    """Each turn after a well-formed action faced the pool so far and the action kinds so far."""
    first = events_of(events, "first_stage")
    pool = set(first[0]["ranking"]) if first else set()
    added = {e["turn"]: e["added"] for e in events_of(events, "subquery")}
    kinds: list[str] = []
    anchors = {}
    for action in events_of(events, "action"):
        turn = action["turn"]
        pool.update(added.get(turn, ()))
        if action["well_formed"]:
            kinds.append(action["kind"])
        anchors[turn + 1] = _key("pool", sorted(pool), kinds)
    return anchors
