"""Anchor states: what each env says a policy turn faced, so turn-level credit compares like with like.

Turn-level credit (``ragym.rl.credit``) compares a turn's step return only with turns of other episodes of the same
GRPO group that faced the same anchor. An anchor is a function of the events before the turn (never of the
turn's own action), written as a JSON string. Each env registers one function ``events -> {turn: anchor}``;
turns it leaves out have no anchor and get the episode advantage only. Turn 0 never has one: every episode of
a group starts from the same task, so the episode advantage is already that state's comparison.

Each env's package declares its function in its ``anchors`` module (``ragym.envs.kbvqa.anchors``, ...).
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


def anchor_key(*parts: Any) -> str:
    """An anchor: ``parts`` (plain JSON data) as one compact JSON string, so equal states give equal strings."""
    return json.dumps(parts, separators=(",", ":"))
