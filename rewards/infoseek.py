"""InfoSeek answer scoring and the official aggregate (MMhops, close to it, is ``ragym.rewards.mmhops``).

Ground truth is the official annotation: ``{"answer_eval": [...], "question_type": "String" | "Time" |
"Numerical"}``. Strings score by normalised exact match against any alias. Numerical ``answer_eval`` is
``[{"wikidata": v, "range": [lo, hi]}]``, the bare object, or the flat ``[lo, hi]`` (all three are ranges):
a single-number prediction must fall inside the range, a range prediction must lie inside it or overlap it
with IoU >= 0.5. Time answers score by exact match, as the official script does (its docstring promises +-1 year; ``time_year_tolerance`` gives that reading).

Departure, in training only: a numerical prediction that holds no number scores 0 here by default. The
official scorer parses it as the range ``[0, 0]``, so "zero", "unknown" or an empty answer scores 1 on every
question whose gold range contains 0; a training reward that paid for text without a number would teach the
policy to write none on such questions. ``no_number_as_zero=True`` is the official reading, which ``ragym eval``
uses (docs/rewards.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, SupportsFloat, SupportsIndex, TypeGuard

from ragym.rewards.text import squad_match

RANGE_IOU_THRESHOLD = 0.5
"""Official: a range prediction is correct when its IoU with the gold range reaches 0.5."""
SINGLE_NUMBER_TOLERANCE = 0.1
"""Official: a gold given as one number (no range) becomes the range value * (1 -+ 0.1)."""

_NUMBER = re.compile(r"[-+]?[.]?[\d]+(?:,\d\d\d)*[\.]?\d*(?:[eE][-+]?\d+)?")
_YEAR = re.compile(r"(?<!\d)(\d{1,4})(?!\d)")
_QUESTION_TYPES = ("string", "time", "numerical")


def _spaced_ranges(text: str) -> str:
    """'9-10' -> '9 - 10', so the hyphen of a range is never read as a minus sign."""
    return "".join(
        " - " if ch == "-" and i > 0 and text[i - 1].isdigit() else ch for i, ch in enumerate(text)
    )


def parse_number_or_range(text: str) -> float | tuple[float, float] | None:
    """The number or ``(low, high)`` range an answer states, as the official parser reads it.

    The first two numbers form a range when ascending; a descending pair keeps the first number only.
    None when the text holds no finite number (the official code returns ``[0, 0]`` there, which credits an
    empty answer whenever the gold range contains 0: ``no_number``).

    >>> parse_number_or_range("about 1,200 m"), parse_number_or_range("9-10"), parse_number_or_range("n/a")
    (1200.0, (9.0, 10.0), None)
    """
    numbers = []
    for token in _NUMBER.findall(_spaced_ranges(text)):
        token = token.replace(",", "").strip(".")
        if token.count(".") > 1:
            token = token.split(".")[0]
        try:
            value = float(token)
        except ValueError:
            continue
        if math.isfinite(value):
            numbers.append(value)
    if not numbers:
        return None
    if len(numbers) >= 2 and numbers[0] <= numbers[1]:
        return (numbers[0], numbers[1])
    return numbers[0]


def no_number(
    parsed: float | tuple[float, float] | None, as_zero: bool
) -> float | tuple[float, float] | None:
    """``parsed``, or for a prediction without a number (None) the official ``[0, 0]`` when ``as_zero``."""
    return (0.0, 0.0) if parsed is None and as_zero else parsed


def range_iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Intersection over union of two closed intervals (a point has a tiny positive length, as upstream).

    >>> round(range_iou((0, 10), (5, 15)), 6)
    0.333333
    """
    lo_a, hi_a, lo_b, hi_b = min(a), max(a), min(b), max(b)
    overlap = max(0.0, min(hi_a, hi_b) - max(lo_a, lo_b))
    union = (hi_a - lo_a + 1e-12) + (hi_b - lo_b + 1e-12) - overlap
    return overlap / union if union > 0 else 0.0


def _is_number(value: Any) -> TypeGuard[SupportsFloat | SupportsIndex | str | bytes]:
    """Whether ``float(value)`` reads a number (the types it accepts); a bool is not one."""
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _gold_range(answer_eval: Any) -> tuple[float, float]:
    """The gold ``[low, high]`` of a numerical question, from any of the three official forms.

    ``[{"wikidata": v, "range": [lo, hi]}, ...]`` (the first entry, as upstream), the bare object, or the flat
    ``[lo, hi]`` the official loader turns them into (numbers or numeric strings).

    >>> _gold_range([{"wikidata": 5, "range": [4, 6]}]), _gold_range({"range": [4, 6]}), _gold_range(["6", "4"])
    ((4.0, 6.0), (4.0, 6.0), (4.0, 6.0))
    """
    if isinstance(answer_eval, list) and len(answer_eval) == 2 and all(map(_is_number, answer_eval)):
        low, high = (float(v) for v in answer_eval)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"numerical answer_eval has a non-finite range: {answer_eval!r}")
        return min(low, high), max(low, high)
    item = answer_eval[0] if isinstance(answer_eval, list) and answer_eval else answer_eval
    if isinstance(item, dict) and isinstance(item.get("range"), list) and len(item["range"]) >= 2:
        low, high = (float(v) for v in item["range"][:2])
    elif _is_number(item):
        value = float(item)
        low, high = value * (1 - SINGLE_NUMBER_TOLERANCE), value * (1 + SINGLE_NUMBER_TOLERANCE)
    else:
        raise ValueError(
            f"numerical answer_eval must be [{{'wikidata': v, 'range': [lo, hi]}}], got {answer_eval!r}"
        )
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"numerical answer_eval has a non-finite range: {answer_eval!r}")
    return min(low, high), max(low, high)


def score_numerical(prediction: str, answer_eval: Any, no_number_as_zero: bool = False) -> float:
    """1.0 when the predicted number lies in the gold range, or the predicted range matches it. A prediction
    with no number scores 0, or, with ``no_number_as_zero`` (the official parser), is the range ``[0, 0]``.

    >>> gold = [{"wikidata": 1887, "range": [1880, 1890]}]
    >>> score_numerical("1887", gold), score_numerical("1884-1892", gold), score_numerical("1800-1900", gold)
    (1.0, 1.0, 0.0)
    >>> score_numerical("zero", [-1, 1]), score_numerical("zero", [-1, 1], no_number_as_zero=True)
    (0.0, 1.0)
    """
    low, high = _gold_range(answer_eval)
    pred = no_number(parse_number_or_range(prediction), no_number_as_zero)
    if pred is None:
        return 0.0
    if not isinstance(pred, tuple):
        return float(low <= pred <= high)
    if low <= pred[0] <= high and low <= pred[1] <= high:
        return 1.0
    return float(range_iou(pred, (low, high)) >= RANGE_IOU_THRESHOLD - 1e-12)


def _year(text: str) -> int | None:
    """The year a date states: its last four-digit number ("12 May 1887", "1887-05-12"), else its last number."""
    numbers = _YEAR.findall(text)
    four_digit = [n for n in numbers if len(n) == 4]
    return int((four_digit or numbers)[-1]) if numbers else None


def score_time(prediction: str, answers: Sequence[str], year_tolerance: int | None = None) -> float:
    """Exact match (official); with ``year_tolerance`` n, also correct when a year is within n years.

    >>> score_time("1887", ["1888"]), score_time("1887", ["1888"], year_tolerance=1)
    (0.0, 1.0)
    """
    if score_strings(prediction, answers):
        return 1.0
    if year_tolerance is None:
        return 0.0
    year = _year(prediction)
    if year is None:
        return 0.0
    golds = [_year(str(answer)) for answer in answers]
    return float(any(gold is not None and abs(year - gold) <= year_tolerance for gold in golds))


def score_strings(prediction: str, answers: Sequence[Any]) -> float:
    """Normalised exact match against any alias.

    >>> score_strings("the Louvre.", ["Louvre", "Musée du Louvre"])
    1.0
    """
    return float(any(squad_match(prediction, str(answer)) for answer in answers))


def score_infoseek(
    prediction: str,
    ground_truth: dict[str, Any],
    time_year_tolerance: int | None = None,
    no_number_as_zero: bool = False,
) -> float:
    """Score one InfoSeek prediction against the official annotation (``no_number_as_zero``: the official
    reading of a numerical prediction without a number, module docstring)."""
    try:
        answer_eval, question_type = ground_truth["answer_eval"], str(ground_truth["question_type"]).lower()
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"InfoSeek ground truth needs answer_eval and question_type, got {ground_truth!r}"
        ) from err
    if question_type not in _QUESTION_TYPES:
        raise ValueError(
            f"InfoSeek question_type must be one of String/Time/Numerical, got {question_type!r}"
        )
    if question_type == "numerical":
        return score_numerical(prediction, answer_eval, no_number_as_zero)
    answers = answer_eval if isinstance(answer_eval, list) else [answer_eval]
    if question_type == "time":
        return score_time(prediction, answers, time_year_tolerance)
    return score_strings(prediction, answers)


def infoseek_final_score(unseen_question: Sequence[float], unseen_entity: Sequence[float]) -> float:
    """The official InfoSeek aggregate: harmonic mean of the two splits' accuracies, in [0, 1].

    >>> round(infoseek_final_score([1, 0], [1, 1, 1, 0]), 4), infoseek_final_score([0], [1])
    (0.6, 0.0)
    """
    accuracies = [
        sum(split) / len(split) if len(split) else 0.0 for split in (unseen_question, unseen_entity)
    ]
    # Upstream replaces a zero accuracy by 1e-12 and reports ~1e-12; the harmonic mean's limit there is 0.
    if min(accuracies) <= 0:
        return 0.0
    return len(accuracies) / sum(1.0 / a for a in accuracies)
