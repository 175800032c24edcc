"""Answer metrics of every benchmark: table-driven cases, safety of list parsing, and the real annotations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragym.rewards import infoseek_final_score, score_answer
from ragym.rewards.answers import answer_data_sources, answer_metric_name
from ragym.rewards.mmlongbench import parse_list

NUM = {"answer_eval": [{"wikidata": 1240.0, "range": [1200.0, 1300.0]}], "question_type": "Numerical"}
STR = {"answer_eval": ["Eiffel Tower", "Tour Eiffel"], "question_type": "String"}
TIME = {"answer_eval": ["1887"], "question_type": "Time"}
EVQA = {"answer": "Alps|Pyrenees", "question_type": "templated"}
EVQA_MULTI = {"answer": "oak&&pine&&elm", "question_type": "multi_answer"}


def mmlb(answer: str, fmt: str) -> dict:
    return {"answer": answer, "answer_format": fmt}


MCQ = {
    "answer_choice": "C",
    "answer": "a tabby cat",
    "options": {"A": "a dog", "B": "a bird", "C": "a tabby cat", "D": "a fish"},
}

CASES = [
    # (id, data_source, prediction, ground truth, expected)
    ("string exact", "infoseek", "Eiffel Tower", STR, 1.0),
    ("string casing", "infoseek", "eIFFEL tOWER", STR, 1.0),
    ("string article", "infoseek", "the Eiffel Tower", STR, 1.0),
    ("string punctuation", "infoseek", "Eiffel Tower!!", STR, 1.0),
    ("string alias", "infoseek", "tour eiffel", STR, 1.0),
    ("string wrong", "infoseek", "Louvre", STR, 0.0),
    ("string superset is wrong", "infoseek", "Eiffel Tower or Louvre", STR, 0.0),
    ("string empty", "infoseek", "", STR, 0.0),
    ("string very long", "infoseek", "Eiffel Tower " * 2000, STR, 0.0),
    ("string unicode accent differs", "infoseek", "Eiffél Tower", STR, 0.0),
    ("number in range", "infoseek", "1240", NUM, 1.0),
    ("number with comma and unit", "infoseek", "about 1,250 metres", NUM, 1.0),
    ("number edge of range", "infoseek", "1300", NUM, 1.0),
    ("number outside range", "infoseek", "1301", NUM, 0.0),
    ("number words only", "infoseek", "twelve hundred", NUM, 0.0),
    ("range inside gold", "infoseek", "1210-1290", NUM, 1.0),
    ("range iou >= 0.5", "infoseek", "1150 - 1300", NUM, 1.0),
    ("range iou < 0.5", "infoseek", "1000-1400", NUM, 0.0),
    ("descending pair keeps first", "infoseek", "1250 to 900", NUM, 1.0),
    ("scientific notation", "infoseek", "1.24e3", NUM, 1.0),
    ("time exact", "infoseek", "1887", TIME, 1.0),
    ("time off by one (official: wrong)", "infoseek", "1888", TIME, 0.0),
    ("time full date (official: wrong)", "infoseek", "31 March 1887", TIME, 0.0),
    ("mmhops uses infoseek protocol", "mmhops", "the tour Eiffel", STR, 1.0),
    ("evqa alternative", "evqa", "the Pyrenees.", EVQA, 1.0),
    ("evqa prefix removed", "evqa", "The answer is Alps", EVQA, 1.0),
    ("evqa number word", "evqa", "three", {"answer": "3", "question_type": "automatic"}, 1.0),
    ("evqa wrong", "evqa", "Andes", EVQA, 0.0),
    ("evqa multi iou 2/3", "evqa", "oak and pine", EVQA_MULTI, 1.0),
    ("evqa multi iou 1/3", "evqa", "oak", EVQA_MULTI, 0.0),
    ("evqa multi with extras", "evqa", "oak, pine, elm, ash, fir", EVQA_MULTI, 1.0),
    ("evqa multi too many extras", "evqa", "oak, ash, fir, yew", EVQA_MULTI, 0.0),
    ("mmlb int", "mmlongbench_doc", "8", mmlb("8", "Int"), 1.0),
    ("mmlb int as float string", "mmlongbench_doc", "8.0", mmlb("8", "Int"), 1.0),
    ("mmlb int wrong", "mmlongbench_doc", "9", mmlb("8", "Int"), 0.0),
    ("mmlb int with words", "mmlongbench_doc", "8 people", mmlb("8", "Int"), 0.0),
    ("mmlb float percent vs fraction", "mmlongbench_doc", "0.1829", mmlb("18.29%", "Float"), 1.0),
    ("mmlb float within 1%", "mmlongbench_doc", "18.3", mmlb("18.29%", "Float"), 1.0),
    ("mmlb float wrong", "mmlongbench_doc", "19.5%", mmlb("18.29%", "Float"), 0.0),
    ("mmlb float nan", "mmlongbench_doc", "nan", mmlb("18.29%", "Float"), 0.0),
    ("mmlb float inf", "mmlongbench_doc", "inf", mmlb("18.29%", "Float"), 0.0),
    ("mmlb str anls typo", "mmlongbench_doc", "Less well off", mmlb("Less well-off", "Str"), 1 - 1 / 13),
    ("mmlb str anls far", "mmlongbench_doc", "More", mmlb("Less well-off", "Str"), 0.0),
    ("mmlb str date exact only", "mmlongbench_doc", "2023-05-13", mmlb("2023-05-12", "Str"), 0.0),
    ("mmlb not answerable", "mmlongbench_doc", "Not answerable", mmlb("Not answerable", "None"), 1.0),
    (
        "mmlb list order-free",
        "mmlongbench_doc",
        "['Rectangle', 'Circle']",
        mmlb("['Circle', 'Rectangle']", "List"),
        1.0,
    ),
    (
        "mmlb list unquoted",
        "mmlongbench_doc",
        "[circle, rectangle]",
        mmlb("['Circle', 'Rectangle']", "List"),
        1.0,
    ),
    ("mmlb list wrong length", "mmlongbench_doc", "['Circle']", mmlb("['Circle', 'Rectangle']", "List"), 0.0),
    ("mmlb list numeric exact", "mmlongbench_doc", "['3', '5']", mmlb("['5', '3']", "List"), 1.0),
    ("generic alias", "generic", "the Fab Four", ["Beatles", "Fab Four"], 1.0),
    ("generic single string", "generic", "Beatles", "The Beatles", 1.0),
    ("generic wrong", "generic", "Rolling Stones", ["Beatles"], 0.0),
    ("synthetic alias list", "synthetic_kbvqa", "Ans 3", ["answer 3", "ans 3"], 1.0),
    ("mragbench letter in prose", "mragbench", "The answer is (C).", MCQ, 1.0),
    ("mragbench wrong letter", "mragbench", "B", MCQ, 0.0),
    ("mragbench option text", "mragbench", "a tabby cat", MCQ, 1.0),
    ("synthetic r3g open answer", "synthetic_r3g", "Red Panda", {"answer": "red panda"}, 1.0),
    # A gold that normalises to nothing ("A", "The"): an answer of only punctuation or articles, or the empty
    # forced answer, normalises to nothing too and must not match it; the gold itself still does.
    ("gold A, answer A", "infoseek", "a.", {"answer_eval": ["A"], "question_type": "String"}, 1.0),
    ("gold A, answer punctuation", "infoseek", ".", {"answer_eval": ["A"], "question_type": "String"}, 0.0),
    ("gold A, empty answer", "mmhops", "", {"answer_eval": ["A"], "question_type": "String"}, 0.0),
    ("gold The, answer an", "generic", "an", ["The"], 0.0),
    ("gold The, answer the", "generic", "The", ["The"], 1.0),
    ("gold A, empty answer, synthetic", "synthetic_kbvqa", "", ["A"], 0.0),
    ("open gold A, answer punctuation", "synthetic_r3g", "-", {"answer": "A"}, 0.0),
    ("gold of punctuation only", "generic", "?", ["?"], 0.0),
]


@pytest.mark.parametrize(
    ("data_source", "prediction", "ground_truth", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_score_answer(data_source: str, prediction: str, ground_truth, expected: float) -> None:
    assert score_answer(data_source, prediction, ground_truth) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("prediction", "tolerance", "expected"),
    [
        ("1888", 1, 1.0),
        ("1889", 1, 0.0),
        ("31 March 1887", 0, 1.0),
        ("1887-03-31", 0, 1.0),
        ("March 1886", 1, 1.0),
        ("no idea", 1, 0.0),
    ],
)
def test_time_year_tolerance_is_an_option(prediction: str, tolerance: int, expected: float) -> None:
    assert score_answer("infoseek", prediction, TIME, time_year_tolerance=tolerance) == expected


def test_generic_token_f1() -> None:
    assert score_answer("generic", "John Lennon", ["Lennon"], generic_metric="f1") == pytest.approx(2 / 3)
    assert score_answer("generic", "", ["Lennon"], generic_metric="f1") == 0.0
    assert score_answer("generic", "?", ["an"], generic_metric="f1") == 0.0
    assert score_answer("generic", "An", ["an"], generic_metric="f1") == 1.0


def test_evqa_equivalence_runs_only_after_exact_match_fails() -> None:
    calls = []

    def equivalence(question: str, reference: str, candidate: str) -> float:
        calls.append((question, reference, candidate))
        return 0.9 if candidate == "the Pyrenean range" else 0.1

    gt = {**EVQA, "question": "Which mountains?"}
    assert score_answer("evqa", "Alps", gt, equivalence=equivalence) == 1.0
    assert calls == []
    assert score_answer("evqa", "the Pyrenean range", gt, equivalence=equivalence) == 1.0
    assert score_answer("evqa", "Andes", gt, equivalence=equivalence) == 0.0
    assert calls[0] == ("Which mountains?", "Alps", "the Pyrenean range")
    assert answer_metric_name("evqa") == "evqa_exact_match_only"
    assert answer_metric_name("evqa", equivalence) == "evqa_exact_match_then_bem"


@pytest.mark.parametrize(
    ("data_source", "ground_truth", "fragment"),
    [
        ("nope", ["x"], "no answer metric"),
        ("infoseek", {"answer_eval": ["x"]}, "question_type"),
        ("infoseek", {"answer_eval": ["x"], "question_type": "Colour"}, "String/Time/Numerical"),
        ("infoseek", {"answer_eval": [{"wikidata": 1}], "question_type": "Numerical"}, "range"),
        ("evqa", {"answer": "...", "question_type": "templated"}, "empty after normalisation"),
        ("evqa", {"answer": "x", "question_type": "riddle"}, "question_type"),
        ("mmlongbench_doc", {"answer": "x", "answer_format": "Blob"}, "answer_format"),
        ("generic", [], "no alias"),
        ("generic", 42, "string or a list"),
    ],
)
def test_bad_ground_truth_is_a_clear_error(data_source: str, ground_truth, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        score_answer(data_source, "x", ground_truth)


def test_list_predictions_are_never_evaluated_as_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    attack = f"[__import__('pathlib').Path({str(marker)!r}).touch(), 'Circle']"
    score = score_answer("mmlongbench_doc", attack, mmlb("['Circle', 'Rectangle']", "List"))
    assert not marker.exists()
    assert score == 0.0
    assert parse_list("[" * 100_000 + "]" * 100_000)  # deep nesting: no RecursionError, falls back to split


def _official_anls(gt: str, pred: str) -> float:
    """MMLongBench-Doc's ``anls_compute`` (threshold 0.5) as its source reads: the distance over the cleaned,
    ``.lower()``-ed strings, normalised by the length of their ``.upper()`` forms."""
    from ragym.rewards.text import levenshtein

    length = max(len(gt.upper()), len(pred.upper()))
    value = 1.0 - levenshtein(gt, pred) / length
    return 0.0 if value <= 0.5 else value


ANLS_CASES = [
    # (name, gold, prediction, by hand): Python's upper() writes ß as "SS" and a ligature as its letters, so the
    # official length is longer than the string; a length without upper() gave 0.857, 0.909 and 0.8 here.
    ("ß in the longer string", "Maßstab", "Masstab", 1 - 1 / 8),
    ("ligatures in both", "ﬁnal ﬁgure", "ﬁnal ﬁgures", 1 - 1 / 13),
    ("ß on both sides", "Straße", "Strasse", 1 - 2 / 7),
    ("ß in a list item", "['Weißbier', 'Pils']", "['Weisbier', 'Pils']", 1 - 1 / 9),
    ("plain ASCII", "Eiffel Tower", "Eifel Tower", 1 - 1 / 12),
]


@pytest.mark.parametrize(
    ("gold", "prediction", "expected"), [c[1:] for c in ANLS_CASES], ids=[c[0] for c in ANLS_CASES]
)
def test_mmlongbench_anls_normalises_as_the_official_scorer(
    gold: str, prediction: str, expected: float
) -> None:
    fmt = "List" if gold.startswith("[") else "Str"
    assert score_answer("mmlongbench_doc", prediction, mmlb(gold, fmt)) == pytest.approx(expected, abs=1e-12)
    if fmt == "Str":
        assert expected == pytest.approx(_official_anls(gold.lower(), prediction.lower()), abs=1e-12)


def test_infoseek_final_score_is_harmonic_mean() -> None:
    assert infoseek_final_score([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    assert infoseek_final_score([0], [1]) < 1e-6


@pytest.mark.parametrize(("unseen_question", "unseen_entity"), [([0, 0], [0]), ([0], [1, 1]), ([1], [0.0])])
def test_infoseek_final_score_with_a_zero_split_is_zero_not_upstreams_epsilon(
    unseen_question, unseen_entity
) -> None:
    # Upstream swaps a zero accuracy for 1e-12 and reports ~1e-12 (printed as "1e-12"); the limit is 0.
    assert infoseek_final_score(unseen_question, unseen_entity) == 0.0


@settings(max_examples=300, deadline=None)
@given(
    prediction=st.text(max_size=300),
    source=st.sampled_from(["infoseek_num", "infoseek_str", "evqa", "mmlb_list", "mmlb_float", "generic"]),
)
def test_any_prediction_scores_in_unit_interval(prediction: str, source: str) -> None:
    data_source, gt = {
        "infoseek_num": ("infoseek", NUM),
        "infoseek_str": ("infoseek", STR),
        "evqa": ("evqa", EVQA_MULTI),
        "mmlb_list": ("mmlongbench_doc", mmlb("['a', 'b']", "List")),
        "mmlb_float": ("mmlongbench_doc", mmlb("1.5", "Float")),
        "generic": ("generic", ["x"]),
    }[source]
    score = score_answer(data_source, prediction, gt)
    assert math.isfinite(score) and 0.0 <= score <= 1.0


def test_every_data_source_is_covered() -> None:
    assert {c[1] for c in CASES} == set(answer_data_sources())


def test_real_mmlongbench_gold_answers_score_themselves(shared_data: Path) -> None:
    path = shared_data / "mmlongbench_doc" / "samples.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    samples = json.loads(path.read_text())
    scores = [
        score_answer("mmlongbench_doc", s["answer"], mmlb(s["answer"], s["answer_format"])) for s in samples
    ]
    assert len(scores) == 1082
    assert all(score == 1.0 for score in scores)
    not_answerable = [s for s in samples if s["answer_format"] == "None"]
    assert all(
        score_answer("mmlongbench_doc", "42", mmlb(s["answer"], "None")) == 0.0 for s in not_answerable
    )
