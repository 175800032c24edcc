"""InfoSeek's three numerical answer_eval forms and MMhops' official numerical rule (ranges, number words)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragym.rewards import Episode, get_reward, score_answer
from ragym.rewards.mmhops import check_ground_truth, replace_number_words

LISTED = {"answer_eval": [{"wikidata": 30.0, "range": [27.0, 33.0]}], "question_type": "Numerical"}
BARE = {"answer_eval": {"wikidata": 30.0, "range": [27.0, 33.0]}, "question_type": "Numerical"}
FLAT = {"answer_eval": ["27.0", "33.0"], "question_type": "Numerical"}
FLAT_NUMBERS = {"answer_eval": [33, 27], "question_type": "Numerical"}
MM_NUM = {"answer_eval": ["13.2", "10.8"], "question_type": "Numerical"}
MM_TIME = {"answer_eval": ["1887"], "question_type": "Time"}


@pytest.mark.parametrize(
    "gold", [LISTED, BARE, FLAT, FLAT_NUMBERS], ids=["list", "object", "flat", "flat-num"]
)
@pytest.mark.parametrize(
    ("prediction", "expected"),
    [("30", 1.0), ("27", 1.0), ("33.5", 0.0), ("26", 0.0), ("28-32", 1.0), ("20-40", 0.0), ("none", 0.0)],
)
def test_infoseek_numerical_forms_are_all_ranges(gold: dict, prediction: str, expected: float) -> None:
    assert score_answer("infoseek", prediction, gold) == expected


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("12", 1.0),
        ("twelve", 1.0),  # number words count (word2number, as upstream)
        ("about twelve years", 1.0),
        ("Twelve", 1.0),
        ("ten", 0.0),
        ("10.8", 1.0),  # min of the values, though listed second
        ("13.2", 1.0),
        ("13.3", 0.0),
        ("11-13", 1.0),
        ("10.8-11", 1.0),  # a range touching the low bound lies inside (its IoU alone, 0.08, would fail)
        ("13-13.2", 1.0),  # ... and the high bound
        ("10.8-13.2", 1.0),
        ("9-10.8", 0.0),  # touching from outside: no overlap
        ("5-20", 0.0),
        ("", 0.0),  # departure: upstream's [0, 0] for no number; 0 is outside this range either way
        ("no idea", 0.0),
    ],
)
def test_mmhops_numerical(prediction: str, expected: float) -> None:
    assert score_answer("mmhops", prediction, MM_NUM) == expected


def test_mmhops_no_number_is_wrong_even_when_zero_is_in_range() -> None:
    # The one deliberate departure: upstream reads "no idea" as [0, 0] and credits it here.
    assert (
        score_answer("mmhops", "no idea", {"answer_eval": ["-1", "1"], "question_type": "Numerical"}) == 0.0
    )
    assert score_answer("mmhops", "zero", {"answer_eval": ["-1", "1"], "question_type": "Numerical"}) == 1.0


def test_mmhops_time_and_string_are_exact_match() -> None:
    assert score_answer("mmhops", "1887.", MM_TIME) == 1.0
    assert score_answer("mmhops", "1888", MM_TIME) == 0.0
    assert score_answer("mmhops", "1888", MM_TIME, time_year_tolerance=1) == 1.0
    assert score_answer("mmhops", "The Louvre", {"answer_eval": ["Louvre"], "question_type": "string"}) == 1.0


def test_number_words_runs() -> None:
    # The upstream pattern swallows the whitespace after a run; the number still parses.
    assert replace_number_words("two hundred and five metres") == "205metres"
    assert (
        score_answer(
            "mmhops",
            "two hundred and five metres",
            {"answer_eval": ["200", "210"], "question_type": "Numerical"},
        )
        == 1.0
    )
    assert replace_number_words("no numbers") == "no numbers"


@pytest.mark.parametrize(
    "gold",
    [
        {"answer_eval": ["x", "y"], "question_type": "Numerical"},
        {"answer_eval": [], "question_type": "String"},
        {"answer_eval": ["1", "nan"], "question_type": "Numerical"},
        {"answer_eval": ["1"], "question_type": "Colour"},
        {"answer_eval": "12"},
        "12",
    ],
)
def test_mmhops_malformed_ground_truth_is_rejected(gold) -> None:
    with pytest.raises(ValueError, match="MMhops"):
        check_ground_truth(gold)


@pytest.mark.parametrize(
    ("gold", "prediction", "expected"),
    [
        # evaluate_mmhops.py's float(gt) fails on InfoSeek's form and its except branch returns 0: scored, not raised.
        (LISTED, "30", 0.0),
        (BARE, "30", 0.0),
        ({"answer_eval": ["x", "y"], "question_type": "Numerical"}, "x", 0.0),
        ({"answer_eval": [], "question_type": "Numerical"}, "0", 0.0),
        ({"answer_eval": ["1", "nan"], "question_type": "Numerical"}, "1", 0.0),
        ({"answer_eval": 12, "question_type": "Numerical"}, "12", 0.0),
        # Upstream scores an unknown problem type as String.
        ({"answer_eval": ["Red"], "question_type": "Colour"}, "red", 1.0),
        ({"answer_eval": ["Red"], "question_type": "Colour"}, "blue", 0.0),
        # Upstream's max() of no alias raises; no alias is simply wrong here.
        ({"answer_eval": [], "question_type": "String"}, "Louvre", 0.0),
        ({"answer_eval": [], "question_type": "Time"}, "1887", 0.0),
    ],
)
def test_mmhops_scores_what_the_official_script_accepts(gold: dict, prediction: str, expected: float) -> None:
    assert score_answer("mmhops", prediction, gold, time_year_tolerance=1) == expected


def test_mmhops_ground_truth_without_its_fields_is_an_error() -> None:
    with pytest.raises(ValueError, match="MMhops ground truth needs"):
        score_answer("mmhops", "12", {"answer_eval": ["12"]})


@settings(max_examples=200, deadline=None)
@given(
    prediction=st.one_of(st.text(max_size=200), st.none(), st.integers()),
    gold=st.sampled_from([LISTED, BARE, FLAT, MM_NUM, MM_TIME]),
)
def test_score_answer_never_raises_on_a_prediction(prediction, gold) -> None:
    for source in ("mmhops", "infoseek"):
        score = score_answer(source, prediction, gold)
        assert math.isfinite(score) and 0.0 <= score <= 1.0


NO_NUMBER_CASES = [
    # (name, data source, prediction, gold range, official score): the official parsers read an answer without a
    # number as [0, 0], so it is right exactly when the gold range holds 0; ragym's training reward pays 0.
    ("infoseek 'zero', range holds 0", "infoseek", "zero", [-1, 1], 1.0),
    ("infoseek 'unknown', range holds 0", "infoseek", "unknown", [0, 5], 1.0),
    ("infoseek empty, range holds 0", "infoseek", "", [-3, 0], 1.0),
    ("infoseek 'zero', range without 0", "infoseek", "zero", [1, 5], 0.0),
    ("infoseek '0', range holds 0 (a number)", "infoseek", "0", [-1, 1], 1.0),
    ("mmhops 'no idea', range holds 0", "mmhops", "no idea", ["-1", "1"], 1.0),
    ("mmhops 'no idea', range without 0", "mmhops", "no idea", ["10.8", "13.2"], 0.0),
]


@pytest.mark.parametrize(
    ("source", "prediction", "gold", "official"),
    [c[1:] for c in NO_NUMBER_CASES],
    ids=[c[0] for c in NO_NUMBER_CASES],
)
def test_an_answer_without_a_number_scores_as_the_official_scorer_only_when_asked(
    source: str, prediction: str, gold: list, official: float
) -> None:
    """``no_number_as_zero`` (what ``ragym eval`` sets) matches the official scorers; the training reward stays
    stricter and never pays text without a number (a named departure)."""
    truth = {"answer_eval": gold, "question_type": "Numerical"}
    assert score_answer(source, prediction, truth, no_number_as_zero=True) == official
    has_number = any(ch.isdigit() for ch in prediction)
    assert score_answer(source, prediction, truth) == (official if has_number else 0.0)
    episode = Episode(
        source, ["t"], [{"type": "answer", "turn": 0, "text": prediction, "forced": False}], truth
    )
    assert get_reward("outcome")(episode, no_number_as_zero=True) == official
    assert get_reward("outcome")(episode) == (
        official if has_number else 0.0
    )  # the training recipe's default
