"""KBVQA-v0 event constructors (``ragym.envs.kbvqa.events``): derived fields, plain JSON, bad fields."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev


def test_verification_derives_gold_in_batch_and_correct() -> None:
    cands = ["e1", "gold"]
    table = [
        (("rerank", "gold", "gold"), (True, True)),
        (("rerank", "e1", "gold"), (True, False)),
        (("reject", None, "gold"), (True, False)),
        (("reject", None, "e9"), (False, True)),
        (("reject", None, None), (False, True)),
        (("rerank", "e1", None), (False, False)),
    ]
    for (decision, entity, gold), (in_batch, correct) in table:
        event = kbvqa_ev.verification(3, decision, entity, 1, 0, cands, gold)
        assert (event["gold_in_batch"], event["correct"]) == (in_batch, correct), (decision, entity, gold)
        assert event["type"] == "verification" and event["turn"] == 3


def test_search_image_event_is_plain_json() -> None:
    event = kbvqa_ev.search_image(np.int64(2), 1, 4, ("a", "b"), "b", np.int32(5))
    assert event == {
        "type": "search_image",
        "turn": 2,
        "image": 1,
        "batch_id": 4,
        "candidates": ["a", "b"],
        "gold_entity": "b",
        "gold_in_batch": True,
        "offset": 5,
        "retriever_version": None,
    }
    assert type(event["turn"]) is int and type(event["offset"]) is int  # numpy ints become ints
    assert json.loads(json.dumps(event)) == event


BAD_EVENTS = [
    ("image 0 (images are 1-based)", lambda: kbvqa_ev.boundary(0, 0, 1), ValueError),
    ("candidates a string", lambda: kbvqa_ev.search_image(0, 1, 0, "ab", None, 0), TypeError),
    ("candidate not a string", lambda: kbvqa_ev.search_image(0, 1, 0, ["a", 3], None, 0), TypeError),
    ("unknown decision", lambda: kbvqa_ev.verification(0, "accept", "a", 1, 0, ["a"], "a"), ValueError),
    ("rerank without entity", lambda: kbvqa_ev.verification(0, "rerank", None, 1, 0, ["a"], "a"), ValueError),
    ("reject with entity", lambda: kbvqa_ev.verification(0, "reject", "a", 1, 0, ["a"], "a"), ValueError),
    ("task gold count", lambda: kbvqa_ev.task(2, ["a"], 2, 5, 8), ValueError),
    ("task no image", lambda: kbvqa_ev.task(0, [], 2, 5, 8), ValueError),
]


@pytest.mark.parametrize(("make", "error"), [c[1:] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS])
def test_bad_fields_raise_naming_the_event(make, error) -> None:
    with pytest.raises(error, match="event"):
        make()


def test_every_kbvqa_constructor_makes_a_registered_kind() -> None:
    made = [
        kbvqa_ev.task(1, [None], 2, 5, 8),
        kbvqa_ev.search_image(0, 1, 0, ["a"], None, 0),
        kbvqa_ev.search_text(0, ["q"], ["p1", "p2"]),
        kbvqa_ev.verification(0, "reject", None, 1, 0, ["a"], None),
        kbvqa_ev.boundary(0, 1, 3),
    ]
    assert [e["type"] for e in made] == list(kbvqa_ev.KINDS)
    assert set(kbvqa_ev.KINDS) <= ev.registered_event_kinds()
    assert made[2]["num_passages"] == 2 and made[0]["turn"] == -1
