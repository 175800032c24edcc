"""R3G-v0 event constructors (``ragym.envs.r3g.events``): derived fields and bad fields."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragym.envs import events as ev
from ragym.envs.r3g import events as r3g_ev


def test_r3g_constructors_make_their_kinds_as_plain_json() -> None:
    made = [
        r3g_ev.r3g_task(["g"], "Angle", 5, 1, "fused", True),
        r3g_ev.plan(0, "cues"),
        r3g_ev.coarse_retrieval(1, ["a", "g"], [0.9, np.float32(0.8)], [0.6, 0.4], ["g"]),
        r3g_ev.judge_error(2, None, "bad_line"),
        r3g_ev.evidence_selected(2, ["a", "g"], [0.6, 0.4], [None, 0.9], [0.6, 1.3], [1], ["g"], "fused"),
    ]
    assert [e["type"] for e in made] == list(r3g_ev.KINDS) and set(
        r3g_ev.KINDS
    ) <= ev.registered_event_kinds()
    assert json.loads(json.dumps(made)) == made
    assert made[2]["gold_in_pool"] is True and type(made[2]["similarities"][1]) is float
    assert made[4]["ranking"] == ["g", "a"] and made[4]["selected"] == ["g"]


def test_ties_in_the_final_score_keep_pool_order() -> None:
    event = r3g_ev.evidence_selected(
        3, ["a", "b", "c"], [0.5] * 3, [None] * 3, [0.5, 0.7, 0.7], [1], [], "stage1"
    )
    assert event["ranking"] == ["b", "c", "a"] and event["stage2"] == [None, None, None]


def test_task_event_records_where_the_pool_comes_from_and_the_guidelines() -> None:
    default = r3g_ev.r3g_task(["g"], "Angle", 5, 1, "fused", True)
    assert (default["pool_source"], default["judge_guidelines"]) == ("corpus", True)
    mrag = r3g_ev.r3g_task(["g"], "Angle", 5, 5, "none", False, "benchmark", False)
    assert (mrag["rerank"], mrag["pool_source"], mrag["judge_guidelines"]) == ("none", "benchmark", False)


BAD = [
    ("unknown rerank mode", lambda: r3g_ev.r3g_task(["g"], "s", 5, 1, "both", True), ValueError),
    ("unknown pool source", lambda: r3g_ev.r3g_task(["g"], "s", 5, 1, "none", True, "clip"), ValueError),
    (
        "guidelines not bool",
        lambda: r3g_ev.r3g_task(["g"], "s", 5, 1, "fused", True, "corpus", "yes"),
        TypeError,
    ),
    ("pool size 0", lambda: r3g_ev.r3g_task(["g"], "s", 0, 1, "fused", True), ValueError),
    ("similarity count", lambda: r3g_ev.coarse_retrieval(1, ["a"], [0.1, 0.2], [1.0], []), ValueError),
    (
        "stage2 not a number",
        lambda: r3g_ev.evidence_selected(1, ["a"], [1.0], ["x"], [1.0], [0], [], "fused"),
        TypeError,
    ),
    (
        "selected outside pool",
        lambda: r3g_ev.evidence_selected(1, ["a"], [1.0], [None], [1.0], [1], [], "fused"),
        ValueError,
    ),
    ("candidate not int", lambda: r3g_ev.judge_error(1, "2", "bad_score"), TypeError),
]


@pytest.mark.parametrize(("make", "error"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_fields_raise_naming_the_event(make, error) -> None:
    with pytest.raises(error, match="event"):
        make()
