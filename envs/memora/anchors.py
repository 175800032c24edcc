"""MEMORA-v0's anchor states for turn-level credit (``ragym.envs.anchors``).

A turn faced the candidate pool (first stage plus every subquery's additions, as a set) and the kinds of the
well-formed actions taken so far.
"""

from __future__ import annotations

from ragym.envs.anchors import anchor_key, register_anchors
from ragym.envs.events import Event, events_of


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
        anchors[turn + 1] = anchor_key("pool", sorted(pool), kinds)
    return anchors
