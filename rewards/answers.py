"""``score_answer``: one entry point for the answer metric of every benchmark ragym trains or evaluates on.

Each data source scores in its benchmark's own annotation form (see the per-benchmark modules):

- ``infoseek`` / ``mmhops``: ``{"answer_eval": [...], "question_type": "String" | "Time" | "Numerical"}`` (MMhops
  numerical ``answer_eval`` is ``[lo, hi]`` strings, and number words in predictions count, as its script does)
- ``evqa``: ``{"answer": "alt1|alt2", "question_type": ...}`` (exact match only unless ``equivalence`` is given)
- ``mmlongbench_doc``: ``{"answer": ..., "answer_format": "Int" | "Float" | "Str" | "List" | "None"}``
- ``generic`` and ``synthetic_kbvqa``: a string or a list of aliases (normalised exact match, or token F1)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ragym.rewards.evqa import AnswerEquivalence, evqa_metric_name, score_evqa
from ragym.rewards.infoseek import score_infoseek
from ragym.rewards.mmhops import score_mmhops
from ragym.rewards.mmlongbench import score_mmlongbench
from ragym.rewards.text import squad_match, token_f1

GENERIC_METRICS = ("em", "f1")
PAPER_TIME_YEAR_TOLERANCE = 1
"""InfoSeek/MMhops Time answers within this many years count (MMAgent-R² 4.1.1): the paper's reward recipe
(``recipes/rewards/mmagent_r2.yaml``, which every KB-VQA training recipe names), ``ragym eval`` and
``ragym rollout`` all score with it (the official script's exact match is ``time_year_tolerance: null``)."""


def _aliases(ground_truth: Any) -> list[str]:
    """A generic ground truth as a non-empty list of alias strings."""
    if isinstance(ground_truth, str):
        aliases = [ground_truth]
    elif isinstance(ground_truth, (list, tuple)):
        aliases = [str(a) for a in ground_truth]
    elif isinstance(ground_truth, dict) and "answers" in ground_truth:
        return _aliases(ground_truth["answers"])
    else:
        raise ValueError(f"generic ground truth must be a string or a list of aliases, got {ground_truth!r}")
    if not aliases:
        raise ValueError("generic ground truth has no alias")
    return aliases


def score_generic(prediction: str, ground_truth: Any, metric: str = "em") -> float:
    """Best normalised exact match (``em``) or token F1 (``f1``) of ``prediction`` over the aliases.

    >>> score_generic("The Beatles", ["Beatles", "Fab Four"])
    1.0
    >>> round(score_generic("John Lennon", "Lennon", metric="f1"), 3)
    0.667
    """
    aliases = _aliases(ground_truth)
    if metric == "em":
        return float(any(squad_match(prediction, alias) for alias in aliases))
    if metric == "f1":
        return max(token_f1(prediction, alias) for alias in aliases)
    raise ValueError(f"generic metric must be one of {GENERIC_METRICS}, got {metric!r}")


AnswerScorer = Callable[..., float]
"""``scorer(prediction, ground_truth, **options) -> float`` in [0, 1]."""

_SCORERS: dict[str, AnswerScorer] = {}


def register_answer_scorer(data_source: str, scorer: AnswerScorer) -> None:
    """Make ``score_answer`` handle ``data_source``; a duplicate name is an error."""
    if data_source in _SCORERS:
        raise ValueError(f"answer scorer for {data_source!r} is already registered")
    _SCORERS[data_source] = scorer


def answer_data_sources() -> list[str]:
    """Every data source ``score_answer`` understands."""
    return sorted(_SCORERS)


def score_answer(
    data_source: str,
    prediction: str | None,
    ground_truth: Any,
    *,
    time_year_tolerance: int | None = None,
    equivalence: AnswerEquivalence | None = None,
    generic_metric: str = "em",
    no_number_as_zero: bool = False,
) -> float:
    """Score ``prediction`` against ``ground_truth`` with ``data_source``'s official metric, in [0, 1].

    ``time_year_tolerance`` (InfoSeek/MMhops Time questions): None is the official exact match, n accepts
    a year within n. ``equivalence`` (E-VQA): the BEM-style model tried after exact match fails.
    ``generic_metric``: ``em`` or ``f1`` for ``generic`` and ``synthetic_kbvqa``. ``no_number_as_zero``
    (InfoSeek/MMhops Numerical questions): read a prediction without a number as 0, as the official scorers
    do (``ragym eval``); False scores it 0, the training reward's departure (``ragym.rewards.infoseek``).

    >>> score_answer("infoseek", "1,240 m", {"answer_eval": [{"wikidata": 1240, "range": [1200, 1300]}],
    ...                                       "question_type": "Numerical"})
    1.0
    """
    if data_source not in _SCORERS:
        raise ValueError(f"no answer metric for data_source {data_source!r}; known: {answer_data_sources()}")
    if not isinstance(prediction, str):
        return 0.0  # no prediction (None from a failed parse) or a non-text one: wrong, never an exception
    options = {
        "time_year_tolerance": time_year_tolerance,
        "equivalence": equivalence,
        "generic_metric": generic_metric,
        "no_number_as_zero": no_number_as_zero,
    }
    score = float(_SCORERS[data_source](prediction, ground_truth, **options))
    # Every scorer returns 0/1 or a similarity; clamp anyway so no reward can leave [0, 1] or be NaN.
    return min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0


def answer_metric_name(data_source: str, equivalence: AnswerEquivalence | None = None) -> str:
    """The label a reported answer score carries (E-VQA without BEM is ``evqa_exact_match_only``).

    >>> answer_metric_name("evqa"), answer_metric_name("infoseek")
    ('evqa_exact_match_only', 'infoseek')
    """
    return evqa_metric_name(equivalence) if data_source == "evqa" else data_source


def _infoseek(
    prediction: str, ground_truth: Any, *, time_year_tolerance: int | None, no_number_as_zero: bool, **_: Any
) -> float:
    return score_infoseek(prediction, ground_truth, time_year_tolerance, no_number_as_zero)


def _evqa(prediction: str, ground_truth: Any, *, equivalence: AnswerEquivalence | None, **_: Any) -> float:
    return score_evqa(prediction, ground_truth, equivalence)


def _mmhops(
    prediction: str, ground_truth: Any, *, time_year_tolerance: int | None, no_number_as_zero: bool, **_: Any
) -> float:
    return score_mmhops(prediction, ground_truth, time_year_tolerance, no_number_as_zero)


def _mmlongbench(prediction: str, ground_truth: Any, **_: Any) -> float:
    return score_mmlongbench(prediction, ground_truth)


def _generic(prediction: str, ground_truth: Any, *, generic_metric: str, **_: Any) -> float:
    return score_generic(prediction, ground_truth, generic_metric)


register_answer_scorer("infoseek", _infoseek)
register_answer_scorer("mmhops", _mmhops)
register_answer_scorer("evqa", _evqa)
register_answer_scorer("mmlongbench_doc", _mmlongbench)
register_answer_scorer("generic", _generic)
register_answer_scorer("synthetic_kbvqa", _generic)
