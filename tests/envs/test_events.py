"""The typed event constructors: the schema is checked where an event is made."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragym.envs import events as ev


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
        event = ev.verification(3, decision, entity, 1, 0, cands, gold)
        assert (event["gold_in_batch"], event["correct"]) == (in_batch, correct), (decision, entity, gold)
        assert event["type"] == "verification" and event["turn"] == 3


def test_search_image_event_is_plain_json() -> None:
    event = ev.search_image(np.int64(2), 1, 4, ("a", "b"), "b", np.int32(5))
    assert event == {
        "type": "search_image", "turn": 2, "image": 1, "batch_id": 4, "candidates": ["a", "b"],
        "gold_entity": "b", "gold_in_batch": True, "offset": 5,
    }  # fmt: skip
    assert type(event["turn"]) is int and type(event["offset"]) is int  # numpy ints become ints
    assert json.loads(json.dumps(event)) == event


BAD_EVENTS = [
    ("bool turn", lambda: ev.action(True, "answer", True), TypeError),
    ("turn below -1", lambda: ev.format_error(-2, "no_action"), ValueError),
    ("well_formed not bool", lambda: ev.action(0, "answer", 1), TypeError),
    ("image 0 (images are 1-based)", lambda: ev.boundary(0, 0, 1), ValueError),
    ("candidates a string", lambda: ev.search_image(0, 1, 0, "ab", None, 0), TypeError),
    ("candidate not a string", lambda: ev.search_image(0, 1, 0, ["a", 3], None, 0), TypeError),
    ("unknown decision", lambda: ev.verification(0, "accept", "a", 1, 0, ["a"], "a"), ValueError),
    ("rerank without entity", lambda: ev.verification(0, "rerank", None, 1, 0, ["a"], "a"), ValueError),
    ("reject with entity", lambda: ev.verification(0, "reject", "a", 1, 0, ["a"], "a"), ValueError),
    ("violation field unknown", lambda: ev.protocol_violation(0, "x", page=3), TypeError),
    ("task gold count", lambda: ev.task(2, ["a"], 2, 5, 8), ValueError),
    ("task no image", lambda: ev.task(0, [], 2, 5, 8), ValueError),
    ("candidates score count", lambda: ev.candidates(0, 0, "q", 0.5, [1, 2], [0.1], [0.5]), ValueError),
    ("evidence new not shown", lambda: ev.evidence(0, 0, [1], [0.5], [2]), ValueError),
    ("float page", lambda: ev.selected(0, 0, [1.0], [1]), TypeError),
    ("nan-free number check", lambda: ev.beliefs(0, 0, ["0.5"]), TypeError),
    ("retrieval_error reason not str", lambda: ev.retrieval_error(0, "bm25", None, "x"), TypeError),
    ("episode_error stage unknown", lambda: ev.episode_error(0, "render", "x"), ValueError),
    ("episode_error error not str", lambda: ev.episode_error(0, "step", None), TypeError),
]


@pytest.mark.parametrize(("make", "error"), [c[1:] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS])
def test_bad_fields_raise_naming_the_event(make, error) -> None:
    with pytest.raises(error, match="event"):
        make()


def test_every_constructor_makes_a_registered_kind() -> None:
    made = [
        ev.action(0, "answer", True), ev.format_error(0, "x"), ev.protocol_violation(0, "x", pages=[1]),
        ev.truncated(0, "max_turns"), ev.answer(0, "y"), ev.task(1, [None], 2, 5, 8),
        ev.search_image(0, 1, 0, ["a"], None, 0), ev.search_text(0, ["q"], ["p1", "p2"]),
        ev.verification(0, "reject", None, 1, 0, ["a"], None), ev.boundary(0, 1, 3),
        ev.candidates(-1, 0, "q", 1.0, [1], [0.9], [0.5, 0.5]), ev.selected(0, 0, [1], [1]),
        ev.evidence(0, 0, [1], [0.5], [1]), ev.feedback(1, 0, "q", "n", [1], []), ev.beliefs(1, 0, [0.6]),
        ev.docmemo_answer(2, "Not answerable", True, 1), ev.retrieval_error(0, "bm25", "timeout", "no answer"),
        ev.episode_error(-1, "reset", "FileNotFoundError: q.jpg"),
        # R3G-v0
        ev.r3g_task(["g"], "Angle", 2, 1, "fused", True), ev.plan(0, "cues"),
        ev.coarse_retrieval(1, ["g", "h"], [0.9, 0.8], [0.9, 0.8], ["g"]), ev.judge_error(2, None, "no_line"),
        ev.evidence_selected(2, ["g", "h"], [0.9, 0.8], [0.5, None], [0.7, 0.8], [0], ["g"], "fused"),
        # MEMORA-v0 (every field is checked in tests/envs/memora/test_memora_events.py)
        ev.memory_read("d", 0, [], []), ev.first_stage(None, ["a"], [1.0]), ev.decompose(0, ["f"], [1.0], [1.0], [[0, 0]]),
        ev.subquery(1, 1, "t", ["a"], [], 1), ev.factor_evidence(2, 1, ["a"], [0.5], ["s"]), ev.verdict(3, ["a"]),
        ev.final_ranking(4, ["a"], [0.1], 10, False, 0.1, 0.0), ev.memory_write(4, "d", False, "no_qrels", None, None, []),
    ]  # fmt: skip
    assert {e["type"] for e in made} == ev.EVENT_KINDS
    assert ev.search_text(0, ["q"], ["p1", "p2"])["num_passages"] == 2
    assert ev.docmemo_answer(2, "x", False, 1) == {
        "type": "answer", "turn": 2, "text": "x", "forced": False, "not_answerable": False, "round": 1,
    }  # fmt: skip
