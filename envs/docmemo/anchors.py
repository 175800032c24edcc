"""DocMemo-v0's anchor states for turn-level credit (``ragym.envs.anchors``).

A turn faced the round and the view shown (``candidates`` before a selection, ``evidence`` before an answer or
refinement) of the row's document (the group shares the document).
"""

from __future__ import annotations

from ragym.envs.anchors import anchor_key, register_anchors
from ragym.envs.events import Event


@register_anchors("DocMemo-v0")
def docmemo_anchors(events: list[Event]) -> dict[int, str]:
    """The turn after a ``candidates`` (or ``evidence``) event faced that round's candidate (evidence) view."""
    anchors = {}
    for event in events:
        if event["type"] in ("candidates", "evidence"):
            anchors[event["turn"] + 1] = anchor_key(event["type"], event["round"])
    return anchors
