"""KBVQA-v0 and KBVQA-Demo-v0's anchor states for turn-level credit (``ragym.envs.anchors``).

The turn right after a candidate batch was served (the turn that verifies it) faced that query image and batch.
"""

from __future__ import annotations

from ragym.envs.anchors import anchor_key, register_anchors
from ragym.envs.events import Event, events_of


@register_anchors("KBVQA-v0", "KBVQA-Demo-v0")
def kbvqa_anchors(events: list[Event]) -> dict[int, str]:
    """The turn after a ``search_image`` event faced that batch: (image, batch id, candidates).

    >>> from ragym.envs.kbvqa import events as kbvqa_ev
    >>> kbvqa_anchors([kbvqa_ev.search_image(0, 1, 0, ["e1", "e2"], "e2", 0)])
    {1: '["batch",1,0,["e1","e2"]]'}
    """
    return {
        e["turn"] + 1: anchor_key("batch", e["image"], e["batch_id"], e["candidates"])
        for e in events_of(events, "search_image")
    }
