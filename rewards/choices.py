"""Multiple-choice answers (MRAG-Bench): the option letter parsed robustly from free text, and its score.

Ground truth: ``{"answer_choice": "B", "answer": "Model X", "options": {"A": ..., ...}}``. A prediction
scores 1 when the letter it names is ``answer_choice``. The letter is read, in order, from: the bare letter
(``B``, ``(B)``, ``B.``, ``B) Model X``), an explicit phrase (``answer is B``, ``Answer: (b)``,
``option B``), one option's text matched exactly (normalised) or contained alone in the prediction, and a
single standalone capital letter. Naming two different letters, or none, is no answer (scores 0).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ragym.rewards.text import normalize_squad, squad_match

LETTERS = ("A", "B", "C", "D")
_LEADING = re.compile(r"^\s*[\(\[]?\s*([A-Da-d])\s*(?:[\)\]\.:,]|$)(?:\s|$)")
_PHRASE = re.compile(
    r"(?:answer|option|choice)\s*(?:is|:|=)?\s*[\(\[]?\s*([A-Da-d])\b(?![\w'])", re.IGNORECASE
)
_STANDALONE = re.compile(r"(?<![\w'])([A-D])(?![\w'])")


def parse_choice(text: str, options: Mapping[str, str] | None = None) -> str | None:
    """The option letter ``text`` names, or None when it names none or several.

    >>> [parse_choice(t) for t in ("B", "(c)", "D. Model Z", "The answer is (A).", "A or B", "maybe")]
    ['B', 'C', 'D', 'A', None, None]
    >>> parse_choice("it is the model y", {"A": "Model W", "B": "Model Y"})
    'B'
    """
    if match := _LEADING.match(text):
        return match.group(1).upper()
    phrases = {m.upper() for m in _PHRASE.findall(text)}
    if len(phrases) == 1:
        return phrases.pop()
    if phrases:
        return None
    if options:
        norm = normalize_squad(text)
        texts = {letter: normalize_squad(str(option)) for letter, option in options.items()}
        exact = [letter for letter, option in texts.items() if option and option == norm]
        if len(exact) == 1:
            return exact[0].upper()
        padded = f" {norm} "
        contained = [letter for letter, option in texts.items() if option and f" {option} " in padded]
        if len(contained) == 1:
            return contained[0].upper()
    standalone = set(_STANDALONE.findall(text))
    return standalone.pop() if len(standalone) == 1 else None


def score_choice(prediction: str, ground_truth: Any, **_: Any) -> float:
    """1.0 when ``prediction`` names the correct option (letter), or matches the answer of an open question.

    >>> score_choice("Answer: B", {"answer_choice": "B", "answer": "Model X"})
    1.0
    """
    if not isinstance(ground_truth, Mapping) or "answer" not in ground_truth:
        raise ValueError(f"a multiple-choice ground truth needs answer_choice/answer, got {ground_truth!r}")
    letter = ground_truth.get("answer_choice")
    if letter:
        return float(parse_choice(prediction, ground_truth.get("options")) == str(letter).upper())
    return float(squad_match(prediction, str(ground_truth["answer"])))
