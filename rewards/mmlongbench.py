"""MMLongBench-Doc answer scoring by ``answer_format`` (Int, Float, Str, List, None = "Not answerable").

Follows the official ``eval_score`` rules, with one deliberate change: the official scorer calls ``eval`` on
list answers that start with ``[``. Model output is data, never code, so lists are read with
``ast.literal_eval`` (literals only) under a size limit, falling back to splitting on commas. Strings are
lower-cased with ``.lower()`` (``clean_string``) and ANLS normalises by the length of their ``.upper()`` forms
(``ragym.rewards.text.anls``), as the official ``anls_compute`` does: ``ß`` and ligatures count as two letters.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from ragym.rewards.text import anls

ANLS_THRESHOLD = 0.5
"""Official: ANLS below or at 0.5 counts as 0."""
FLOAT_REL_TOL = 0.01
"""Official: floats match within 1% relative tolerance (or after rounding to the shared precision)."""
MAX_LIST_CHARS = 10_000
"""Longer list strings are not parsed as literals (``literal_eval`` on deep nesting can exhaust the stack)."""
FORMATS = ("Int", "Float", "Str", "List", "None")

_PARENTHESES = re.compile(r"\s*\([^)]*\)")
_EDGE_QUOTES = re.compile(r"^['\"]|['\"]$")
_EXACT_PATTERNS = (
    re.compile(r"\b\d+(-\d+|\s\d+)?\b"),  # telephone-like numbers
    re.compile(r"\b\d{4}[-\s]\d{2}[-\s]\d{2}\b"),  # YYYY-MM-DD
    re.compile(r"\b\d{4}[-\s]\d{2}\b"),  # YYYY-MM
    re.compile(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}"),  # e-mail
)


def clean_string(value: Any) -> str:
    """Official cleaning: lower-case, drop parentheses, edge quotes, a leading ``$`` and a trailing ``%``.

    >>> clean_string(' "$12.5%" (approx.) ')
    '12.5'
    """
    s = str(value).lower().strip()
    s = _PARENTHESES.sub("", s).strip()
    s = _EDGE_QUOTES.sub("", s).strip()
    return s.lstrip("$").strip().rstrip("%").strip()


def needs_exact_match(s: str) -> bool:
    """Official: URLs, file names, page refs, phone numbers, times, dates and e-mails need exact match."""
    if "https://" in s or s.endswith((".py", "ipynb")) or s.startswith("page") or "a.m." in s or "p.m." in s:
        return True
    return any(p.fullmatch(s) for p in _EXACT_PATTERNS)


def _precision(x: float) -> int:
    text = str(x)
    return len(text.split(".")[-1]) if "." in text else 3


def float_equal(reference: float, prediction: float) -> bool:
    """Official Float rule: equal as a value, a percentage or a fraction, within 1% or after rounding.

    >>> float_equal(18.29, 0.1829), float_equal(18.29, 18.3), float_equal(18.29, 19.0)
    (True, True, False)
    """
    if not (math.isfinite(reference) and math.isfinite(prediction)):
        return False
    for item in (reference / 100, reference, reference * 100):
        if math.isclose(item, prediction, rel_tol=FLOAT_REL_TOL):
            return True
        digits = max(min(_precision(prediction), _precision(item)), 2)
        if round(prediction, digits) == round(item, digits):
            return True
    return False


def parse_list(value: Any) -> list[Any]:
    """A list answer as a list, read safely: literals only, never evaluated as code.

    >>> parse_list("['White', '10%']"), parse_list("[White, 10%]"), parse_list("Paris")
    (['White', '10%'], ['White', '10%'], ['Paris'])
    >>> parse_list("[__import__('os').getcwd()]")
    ["__import__('os').getcwd()"]
    """
    if isinstance(value, list):
        return value
    text = str(value).strip()
    if not (text.startswith("[") and text.endswith("]")):
        return [value]
    if len(text) <= MAX_LIST_CHARS:
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            parsed = None
        if isinstance(parsed, (list, tuple)):
            return list(parsed)
    items = [item.strip() for item in text[1:-1].split(",")]
    return [item for item in items if item]


def _score_int(gt: Any, pred: str) -> float:
    try:
        reference = int(str(gt).strip())
    except ValueError:
        # Four real "Int" answers are not integers ("21%", "GPT-4"); the official scorer gives every
        # prediction 0 on them. Scoring them as strings keeps them answerable.
        return _score_str(gt, pred)
    try:
        # Official: int(float(pred)) truncates, so "5.7" scores against 5.
        return float(reference == int(float(pred)))
    except (ValueError, OverflowError):
        return 0.0


def _score_float(gt: Any, pred: str) -> float:
    try:
        reference, prediction = float(clean_string(gt)), float(clean_string(pred))
    except ValueError:
        return 0.0
    return float(float_equal(reference, prediction))


def _score_str(gt: Any, pred: Any) -> float:
    reference, prediction = clean_string(gt), clean_string(pred)
    if needs_exact_match(reference):
        return float(reference == prediction)
    return anls(reference, prediction, ANLS_THRESHOLD)


def _score_list(gt: Any, pred: str) -> float:
    references, predictions = parse_list(gt), parse_list(pred)
    if len(references) != len(predictions):
        return 0.0
    if not references:
        # One real answer is "[]"; the official scorer crashes on it (gt[0]). An empty list matches only itself.
        return 1.0
    references = sorted(clean_string(r) for r in references)
    predictions = sorted(clean_string(p) for p in predictions)
    first = references[0]
    try:
        float(first)
        numeric = True
    except ValueError:
        numeric = False
    if numeric or needs_exact_match(first):
        return float("-".join(references) == "-".join(predictions))
    return min(anls(r, p, ANLS_THRESHOLD) for r, p in zip(references, predictions, strict=True))


def score_mmlongbench(prediction: str, ground_truth: dict[str, Any]) -> float:
    """Official MMLongBench-Doc score of one prediction, in [0, 1].

    >>> score_mmlongbench("8", {"answer": "8", "answer_format": "Int"})
    1.0
    >>> score_mmlongbench("not answerable", {"answer": "Not answerable", "answer_format": "None"})
    1.0
    """
    try:
        answer, answer_format = ground_truth["answer"], ground_truth["answer_format"]
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"MMLongBench-Doc ground truth needs answer and answer_format, got {ground_truth!r}"
        ) from err
    if answer_format == "Int":
        return _score_int(answer, prediction)
    if answer_format == "Float":
        return _score_float(answer, prediction)
    if answer_format in ("Str", "None"):
        return _score_str(answer, prediction)
    if answer_format == "List":
        return _score_list(answer, prediction)
    raise ValueError(f"MMLongBench-Doc answer_format must be one of {FORMATS}, got {answer_format!r}")
