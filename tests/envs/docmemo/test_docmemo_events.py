"""DocMemo-v0 event constructors (``ragym.envs.docmemo.events``): their kinds, the answer's fields, bad fields."""

from __future__ import annotations

import json

import pytest

from ragym.envs import events as ev
from ragym.envs.docmemo import events as docmemo_ev

BAD_EVENTS = [
    (
        "candidates score count",
        lambda: docmemo_ev.candidates(0, 0, "q", 0.5, [1, 2], [0.1], [0.5]),
        ValueError,
    ),
    ("evidence new not shown", lambda: docmemo_ev.evidence(0, 0, [1], [0.5], [2]), ValueError),
    ("float page", lambda: docmemo_ev.selected(0, 0, [1.0], [1]), TypeError),
    ("nan-free number check", lambda: docmemo_ev.beliefs(0, 0, ["0.5"]), TypeError),
    ("answer round negative", lambda: docmemo_ev.docmemo_answer(0, "x", False, -1), ValueError),
]


@pytest.mark.parametrize(("make", "error"), [c[1:] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS])
def test_bad_fields_raise_naming_the_event(make, error) -> None:
    with pytest.raises(error, match="event"):
        make()


def test_every_docmemo_constructor_makes_a_registered_kind() -> None:
    made = [
        docmemo_ev.candidates(-1, 0, "q", 1.0, [1], [0.9], [0.5, 0.5]),
        docmemo_ev.selected(0, 0, [1], [1]),
        docmemo_ev.evidence(0, 0, [1], [0.5], [1]),
        docmemo_ev.feedback(1, 0, "q", "n", [1], []),
        docmemo_ev.beliefs(1, 0, [0.6]),
    ]
    assert [e["type"] for e in made] == list(docmemo_ev.KINDS)
    assert set(docmemo_ev.KINDS) <= ev.registered_event_kinds()
    assert made[0]["lambda"] == 1.0 and json.loads(json.dumps(made)) == made


def test_the_docmemo_answer_is_the_shared_answer_plus_its_own_fields() -> None:
    assert docmemo_ev.docmemo_answer(2, "x", False, 1) == {
        "type": "answer",
        "turn": 2,
        "text": "x",
        "forced": False,
        "not_answerable": False,
        "round": 1,
    }
