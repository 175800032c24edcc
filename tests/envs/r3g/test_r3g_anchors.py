"""R3G-v0's anchor states (``ragym.envs.r3g.anchors``), from the events before each turn."""

from __future__ import annotations

import json

from ragym.envs.anchors import turn_anchors
from ragym.envs.r3g import events as r3g_ev


def test_r3g_anchor_is_the_pool_for_the_judge_and_the_evidence_for_the_answer() -> None:
    events = [
        r3g_ev.plan(0, "cues"),
        r3g_ev.coarse_retrieval(1, ["x", "g"], [0.9, 0.8], [0.6, 0.4], ["g"]),
        r3g_ev.evidence_selected(2, ["x", "g"], [0.6, 0.4], [0.1, 0.9], [0.7, 1.3], [1], ["g"], "fused"),
    ]
    anchors = {t: json.loads(a) for t, a in turn_anchors("R3G-v0", events).items()}
    assert anchors == {2: ["pool", ["x", "g"]], 3: ["evidence", ["g"]]}
