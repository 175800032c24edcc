"""DocMemo-v0's anchor states (``ragym.envs.docmemo.anchors``), from the events before each turn."""

from __future__ import annotations

import json

from ragym.envs.anchors import turn_anchors
from ragym.envs.docmemo import events as docmemo_ev


def test_docmemo_anchor_is_the_round_and_view_and_turn_zero_has_none() -> None:
    events = [
        docmemo_ev.candidates(-1, 0, "q", 0.5, [1, 2], [0.9, 0.1], [0.5] * 4),
        docmemo_ev.selected(0, 0, [1], [1]),
        docmemo_ev.evidence(0, 0, [1], [0.5], [1]),
        docmemo_ev.feedback(1, 0, "q2", "n", [1], []),
        docmemo_ev.candidates(1, 1, "q2", 0.4, [3, 4], [0.8, 0.2], [0.5] * 4),
    ]
    anchors = turn_anchors("DocMemo-v0", events)
    assert {t: json.loads(a) for t, a in anchors.items()} == {1: ["evidence", 0], 2: ["candidates", 1]}
