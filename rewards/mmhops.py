"""MMhops answer scoring, as its official ``evaluate_mmhops.py`` computes it.

Ground truth is the row's ``{"answer_eval": [...], "question_type": "String" | "Time" | "Numerical"}``
(``question_type`` is the dataset's ``problem_type``). String and Time: normalised exact match against any
alias. Numerical: ``answer_eval`` holds numeric strings; the gold range is their min and max. English
number words in the prediction are read as numbers first ("twelve" -> 12, via ``word2number`` as upstream),
then a single number must lie inside the range and a range must lie inside it or reach IoU >= 0.5.

Scoring accepts what the official script accepts and never raises on it: a numerical ``answer_eval`` that is
not all numbers (InfoSeek's ``[{"wikidata": v, "range": [lo, hi]}]`` included) scores 0, as upstream's
``float(gt)`` fails into ``return 0``; an unknown question type scores as String, as upstream does.
``check_ground_truth`` is the strict check data prep runs, so such rows are rejected there, not scored.

Departures (named in docs/rewards.md): a prediction with no number scores 0; upstream parses it as ``[0, 0]``,
which credits an empty answer whenever the gold range contains 0. A NaN gold bound scores 0 (upstream's
min/max of it depends on order), and String/Time with no alias score 0 (upstream's ``max`` of nothing raises).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ragym.rewards.infoseek import (
    RANGE_IOU_THRESHOLD,
    no_number,
    parse_number_or_range,
    range_iou,
    score_strings,
    score_time,
)

QUESTION_TYPES = ("string", "time", "numerical")
_NUMBER_WORDS = re.compile(
    r"\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
    r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|"
    r"thousand|million|billion|trillion|point|and|[-\s])+\b",
    re.IGNORECASE,
)


def replace_number_words(text: str) -> str:
    """Runs of English number words as digits (the upstream pattern also takes the spaces around a run).

    >>> replace_number_words("about twelve hundred metres")
    'about1200metres'
    """
    from word2number import w2n

    def convert(match: re.Match[str]) -> str:
        try:
            return str(w2n.word_to_num(match.group()))
        except Exception:  # noqa: BLE001 - word2number raises ValueError and, on odd runs, IndexError
            return match.group()

    return _NUMBER_WORDS.sub(convert, text)


def official_gold_range(answer_eval: Any) -> tuple[float, float] | None:
    """The gold ``(low, high)`` as the official script reads it; None where its ``float()`` fails (it scores 0).

    >>> official_gold_range(["13.2", "10.8"]), official_gold_range([{"wikidata": 12, "range": [10, 14]}])
    ((10.8, 13.2), None)
    """
    try:
        values = [float(v) for v in answer_eval]
    except (TypeError, ValueError):
        return None
    if not values or any(math.isnan(v) for v in values):
        return None
    return min(values), max(values)


def gold_range(answer_eval: Any) -> tuple[float, float]:
    """The gold ``(low, high)`` of a numerical question, strictly: a finite number list or a ValueError (prep).

    >>> gold_range(["13.2", "10.8"])
    (10.8, 13.2)
    """
    if not isinstance(answer_eval, (list, tuple)) or not answer_eval:
        raise ValueError(f"MMhops numerical answer_eval must be a list of numbers, got {answer_eval!r}")
    bounds = official_gold_range(answer_eval)
    if bounds is None:
        raise ValueError(f"MMhops numerical answer_eval has a non-number: {answer_eval!r}")
    if not all(math.isfinite(v) for v in bounds):
        raise ValueError(f"MMhops numerical answer_eval has a non-finite value: {answer_eval!r}")
    return bounds


def score_numerical(prediction: str, answer_eval: Any, no_number_as_zero: bool = False) -> float:
    """1.0 when the prediction's number lies in the gold range or its range matches it; 0 for a gold upstream
    can't read. A prediction with no number scores 0, or, with ``no_number_as_zero``, is upstream's ``[0, 0]``
    (a departure in training, as InfoSeek's: ``ragym.rewards.infoseek``).

    >>> score_numerical("twelve", ["10.8", "13.2"]), score_numerical("9-11", ["10.8", "13.2"])
    (1.0, 0.0)
    >>> score_numerical("no idea", ["-1", "1"]), score_numerical("no idea", ["-1", "1"], no_number_as_zero=True)
    (0.0, 1.0)
    """
    bounds = official_gold_range(answer_eval)
    pred = no_number(parse_number_or_range(replace_number_words(prediction)), no_number_as_zero)
    if bounds is None or pred is None:
        return 0.0
    low, high = bounds
    if not isinstance(pred, tuple):
        return float(low <= pred <= high)
    if low <= pred[0] <= high and low <= pred[1] <= high:
        return 1.0
    return float(range_iou(pred, (low, high)) >= RANGE_IOU_THRESHOLD - 1e-12)


def _fields(ground_truth: Any) -> tuple[Any, str]:
    """``(answer_eval, lower-case question type)`` of an annotation; a missing field is a ValueError naming it."""
    if (
        not isinstance(ground_truth, dict)
        or "answer_eval" not in ground_truth
        or "question_type" not in ground_truth
    ):
        raise ValueError(f"MMhops ground truth needs answer_eval and question_type, got {ground_truth!r}")
    return ground_truth["answer_eval"], str(ground_truth["question_type"]).lower()


def check_ground_truth(ground_truth: Any) -> tuple[list[Any], str]:
    """``(answer_eval, lower-case question type)``; a malformed annotation is a ValueError naming it."""
    answer_eval, question_type = _fields(ground_truth)
    if question_type not in QUESTION_TYPES:
        raise ValueError(f"MMhops question_type must be one of String/Time/Numerical, got {question_type!r}")
    if not isinstance(answer_eval, (list, tuple)) or not answer_eval:
        raise ValueError(f"MMhops answer_eval must be a non-empty list, got {answer_eval!r}")
    if question_type == "numerical":
        gold_range(answer_eval)
    return list(answer_eval), question_type


def score_mmhops(
    prediction: str,
    ground_truth: dict[str, Any],
    time_year_tolerance: int | None = None,
    no_number_as_zero: bool = False,
) -> float:
    """Score one MMhops prediction against its annotation (official metric; ``time_year_tolerance`` and
    ``no_number_as_zero`` as InfoSeek's).

    >>> score_mmhops("the Louvre", {"answer_eval": ["Louvre"], "question_type": "String"})
    1.0
    """
    answer_eval, question_type = _fields(ground_truth)
    if question_type == "numerical":
        return score_numerical(prediction, answer_eval, no_number_as_zero)
    answers = list(answer_eval) if isinstance(answer_eval, (list, tuple)) else [answer_eval]
    if question_type == "time":
        return score_time(prediction, answers, time_year_tolerance)
    return score_strings(prediction, answers)  # String, and any unknown type, as upstream
