"""R3G-v0's anchor states for turn-level credit (``ragym.envs.anchors``).

The judge turn faced the coarse pool; the answer turn faced the selected evidence.
"""

from __future__ import annotations

from ragym.envs.anchors import anchor_key, register_anchors
from ragym.envs.events import Event


@register_anchors("R3G-v0")
def r3g_anchors(events: list[Event]) -> dict[int, str]:
    """The judge turn faced the coarse pool; the answer turn faced the selected evidence."""
    anchors = {}
    for event in events:  # in order: without a judge turn the evidence (shown last) is what the next turn saw
        if event["type"] == "coarse_retrieval":
            anchors[event["turn"] + 1] = anchor_key("pool", event["pool"])
        elif event["type"] == "evidence_selected":
            anchors[event["turn"] + 1] = anchor_key("evidence", event["selected"])
    return anchors
