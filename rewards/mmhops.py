"""MMhops answer scoring, as its official ``evaluate_mmhops.py`` computes it.

Ground truth is the row's ``{"answer_eval": [...], "question_type": "String" | "Time" | "Numerical"}``
(``question_type`` is the dataset's ``problem_type``). String and Time: normalised exact match against any
alias. Numerical: ``answer_eval`` holds numeric strings; the gold range is their min and max. English
number words in the prediction are read as numbers first ("twelve" -> 12, via ``word2number`` as upstream),
then a single number must lie inside the range and a range must lie inside it or reach IoU >= 0.5.

Departure (named in the README): a prediction with no number scores 0; upstream parses it as ``[0, 0]``,
which credits an empty answer whenever the gold range contains 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from rewards.infoseek import RANGE_IOU_THRESHOLD, parse_number_or_range, range_iou, score_strings, score_time

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


def gold_range(answer_eval: Any) -> tuple[float, float]:
    """The gold ``(low, high)`` of a numerical question: min and max of its numeric strings.

    >>> gold_range(["13.2", "10.8"])
    (10.8, 13.2)
    """
    if not isinstance(answer_eval, (list, tuple)) or not answer_eval:
        raise ValueError(f"MMhops numerical answer_eval must be a list of numbers, got {answer_eval!r}")
    try:
        values = [float(v) for v in answer_eval]
    except (TypeError, ValueError) as err:
        raise ValueError(f"MMhops numerical answer_eval has a non-number: {answer_eval!r}") from err
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"MMhops numerical answer_eval has a non-finite value: {answer_eval!r}")
    return min(values), max(values)


def score_numerical(prediction: str, answer_eval: Sequence[Any]) -> float:
    """1.0 when the prediction's number lies in the gold range or its range matches it.

    >>> score_numerical("twelve", ["10.8", "13.2"]), score_numerical("9-11", ["10.8", "13.2"])
    (1.0, 0.0)
    """
    low, high = gold_range(answer_eval)
    pred = parse_number_or_range(replace_number_words(prediction))
    if pred is None:
        return 0.0
    if isinstance(pred, float):
        return float(low <= pred <= high)
    if low <= pred[0] <= high and low <= pred[1] <= high:
        return 1.0
    return float(range_iou(pred, (low, high)) >= RANGE_IOU_THRESHOLD - 1e-12)


def check_ground_truth(ground_truth: Any) -> tuple[list[Any], str]:
    """``(answer_eval, lower-case question type)``; a malformed annotation is a ValueError naming it."""
    if (
        not isinstance(ground_truth, dict)
        or "answer_eval" not in ground_truth
        or "question_type" not in ground_truth
    ):
        raise ValueError(f"MMhops ground truth needs answer_eval and question_type, got {ground_truth!r}")
    answer_eval, question_type = ground_truth["answer_eval"], str(ground_truth["question_type"]).lower()
    if question_type not in QUESTION_TYPES:
        raise ValueError(f"MMhops question_type must be one of String/Time/Numerical, got {question_type!r}")
    if not isinstance(answer_eval, (list, tuple)) or not answer_eval:
        raise ValueError(f"MMhops answer_eval must be a non-empty list, got {answer_eval!r}")
    if question_type == "numerical":
        gold_range(answer_eval)
    return list(answer_eval), question_type


def score_mmhops(
    prediction: str, ground_truth: dict[str, Any], time_year_tolerance: int | None = None
) -> float:
    """Score one MMhops prediction against its annotation (official metric; ``time_year_tolerance`` as InfoSeek's).

    >>> score_mmhops("the Louvre", {"answer_eval": ["Louvre"], "question_type": "String"})
    1.0
    """
    answer_eval, question_type = check_ground_truth(ground_truth)
    if question_type == "numerical":
        return score_numerical(prediction, answer_eval)
    if question_type == "time":
        return score_time(prediction, answer_eval, time_year_tolerance)
    return score_strings(prediction, answer_eval)
