"""KBVQA-v0 and KBVQA-Demo-v0's anchor states (``ragym.envs.kbvqa.anchors``), from the events before each turn."""

from __future__ import annotations

import json

from ragym.envs.anchors import turn_anchors
from ragym.envs.kbvqa import events as kbvqa_ev


def test_kbvqa_anchor_is_the_image_and_batch_the_next_turn_verifies() -> None:
    events = [
        kbvqa_ev.search_image(0, 2, 0, ["a", "b"], "b", 0),
        kbvqa_ev.verification(1, "reject", None, 2, 0, ["a", "b"], "b"),
        kbvqa_ev.search_image(1, 2, 1, ["c", "d"], "b", 2),
    ]
    anchors = turn_anchors("KBVQA-v0", events)
    assert {t: json.loads(a) for t, a in anchors.items()} == {
        1: ["batch", 2, 0, ["a", "b"]],
        2: ["batch", 2, 1, ["c", "d"]],
    }
    assert turn_anchors("KBVQA-Demo-v0", events) == anchors
