"""MEMORA-v0's anchor states (``ragym.envs.memora.anchors``), from the events before each turn."""

from __future__ import annotations

import json

from ragym.envs import events as ev
from ragym.envs.anchors import turn_anchors
from ragym.envs.memora import events as memora_ev


def test_memora_anchor_is_the_pool_and_the_actions_so_far() -> None:
    events = [
        memora_ev.first_stage("q1", ["d2", "d1"], [2.0, 1.0]),
        ev.action(0, "decompose", True),
        ev.action(1, "subquery", True),
        memora_ev.subquery(1, 1, "sq", ["d3", "d1"], ["d3"], 3),
        ev.action(2, "invalid", False),
    ]
    anchors = {t: json.loads(a) for t, a in turn_anchors("MEMORA-v0", events).items()}
    assert anchors == {
        1: ["pool", ["d1", "d2"], ["decompose"]],
        2: ["pool", ["d1", "d2", "d3"], ["decompose", "subquery"]],
        3: ["pool", ["d1", "d2", "d3"], ["decompose", "subquery"]],
    }
