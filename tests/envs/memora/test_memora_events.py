"""MEMORA-v0 event constructors (``ragym.envs.memora.events``): every constructor makes its registered kind; bad fields raise."""

from __future__ import annotations

import json

import pytest

from ragym.envs import events as ev
from ragym.envs.memora import events as memora_ev


def test_every_memora_constructor_makes_a_registered_kind() -> None:
    made = [
        memora_ev.memory_read("d", 3, [0.9], ["q"]),
        memora_ev.first_stage("q1", ["a", "b"], [2.0, 1.0]),
        memora_ev.decompose(0, ["f1", "f2"], [1.0, 3.0], [0.25, 0.75], [[0, 0], [1, 2]]),
        memora_ev.subquery(1, 1, "text", ["a", "c"], ["c"], 3),
        memora_ev.factor_evidence(2, 1, ["a"], [0.8], ["s"]),
        memora_ev.verdict(3, ["c", "a"]),
        memora_ev.final_ranking(4, ["c", "a"], [0.5, 0.1], 10, False, 0.4, 0.5),
        memora_ev.memory_write(4, "d", True, "written", 1.0, 0.5, ["helped", "hurt"]),
    ]
    assert [e["type"] for e in made] == list(memora_ev.KINDS) and set(
        memora_ev.KINDS
    ) <= ev.registered_event_kinds()
    assert made[0]["hits"] == 1 and made[0]["turn"] == -1 and made[1]["turn"] == -1
    assert all(json.loads(json.dumps(e)) == e for e in made)


BAD = [
    ("memory similarities vs queries", lambda: memora_ev.memory_read("d", 1, [0.5, 0.4], ["q"]), ValueError),
    ("first-stage score count", lambda: memora_ev.first_stage(None, ["a"], []), ValueError),
    (
        "decompose list lengths",
        lambda: memora_ev.decompose(0, ["f"], [1.0, 2.0], [1.0], [[0, 0]]),
        ValueError,
    ),
    ("factor 0 (factors are 1-based)", lambda: memora_ev.subquery(0, 0, "t", [], [], 0), ValueError),
    ("added not retrieved", lambda: memora_ev.subquery(0, 1, "t", ["a"], ["b"], 2), ValueError),
    ("edge weight above 1", lambda: memora_ev.factor_evidence(0, 1, ["a"], [1.5], ["s"]), ValueError),
    ("forced not bool", lambda: memora_ev.final_ranking(0, [], [], 10, 0, 0.0, 0.0), TypeError),
    ("ndcg not a number", lambda: memora_ev.memory_write(0, "d", True, "written", "1", None, []), TypeError),
]


@pytest.mark.parametrize(("make", "error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_fields_raise_naming_the_event(make, error) -> None:
    with pytest.raises(error, match="event"):
        make()
