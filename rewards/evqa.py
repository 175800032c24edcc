"""Encyclopedic-VQA answer scoring: official exact match, then an answer-equivalence model (BEM) behind an interface.

Ground truth is the official annotation ``{"answer": "alt1|alt2", "question_type": ..., "question": ...}``.
``multi_answer`` references join their items with ``&&`` and score by list IoU >= 0.5, as the official code
does. Without an equivalence model the score is exact match only, and ``evqa_metric_name`` labels it so.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from ragym.rewards.text import normalize_evqa

QUESTION_TYPES = ("templated", "automatic", "multi_answer", "2_hop")
MULTI_ANSWER_IOU = 0.5
"""Official: a multi-answer prediction is correct when its item set has IoU >= 0.5 with the reference's."""
EQUIVALENCE_THRESHOLD = 0.5
"""Official: BEM's probability of equivalence is thresholded at 0.5."""


class AnswerEquivalence(Protocol):
    """A learned answer-equivalence scorer (BEM): probability that ``candidate`` means ``reference``."""

    def __call__(self, question: str, reference: str, candidate: str) -> float:
        """Probability in [0, 1]."""
        ...


def evqa_metric_name(equivalence: AnswerEquivalence | None) -> str:
    """How an E-VQA score must be labelled where it is reported.

    >>> evqa_metric_name(None)
    'evqa_exact_match_only'
    """
    return "evqa_exact_match_only" if equivalence is None else "evqa_exact_match_then_bem"


def _split_items(candidate: str) -> list[str]:
    """The items of a list answer: separators ',', ' and ', ' & ' (official)."""
    return candidate.replace(" and ", ",").replace(" & ", ",").split(",")


def _exact_match(reference: str, candidate: str, multi_answer: bool) -> bool:
    """Official single-answer or multi-answer exact match for one reference."""
    if not multi_answer:
        ref = normalize_evqa(reference)
        if not ref:
            raise ValueError(f"E-VQA reference {reference!r} is empty after normalisation")
        return ref == normalize_evqa(candidate)
    refs = {r for r in map(normalize_evqa, reference.split("&&")) if r}
    if not refs:
        raise ValueError(f"E-VQA multi-answer reference {reference!r} is empty after normalisation")
    cands = {c for c in map(normalize_evqa, _split_items(candidate)) if c}
    return len(refs & cands) / len(refs | cands) >= MULTI_ANSWER_IOU


def score_evqa(
    prediction: str, ground_truth: dict[str, Any], equivalence: AnswerEquivalence | None = None
) -> float:
    """Official E-VQA score: 1.0 on exact match with any reference, else the equivalence model's verdict.

    >>> score_evqa("the Pyrenees", {"answer": "Alps|Pyrenees", "question_type": "templated"})
    1.0
    >>> score_evqa("oak and pine", {"answer": "oak&&pine&&elm", "question_type": "multi_answer"})
    1.0
    """
    if not isinstance(ground_truth, dict) or "answer" not in ground_truth:
        raise ValueError(f"E-VQA ground truth needs an 'answer' field, got {ground_truth!r}")
    answer = ground_truth["answer"]
    references = [str(a) for a in answer] if isinstance(answer, list) else str(answer).split("|")
    question_type = ground_truth.get("question_type", "automatic")
    if question_type not in QUESTION_TYPES:
        raise ValueError(f"E-VQA question_type must be one of {QUESTION_TYPES}, got {question_type!r}")
    multi = question_type == "multi_answer"
    if any(_exact_match(ref, prediction, multi) for ref in references):
        return 1.0
    if equivalence is None or not prediction.strip():
        return 0.0
    question = str(ground_truth.get("question", ""))
    for ref in references:
        # Upstream BEM reads a list reference as a comma-separated phrase.
        reference = ref.replace("&&", ",") if multi else ref
        if float(equivalence(question, reference, prediction)) >= EQUIVALENCE_THRESHOLD:
            return 1.0
    return 0.0


class HFAnswerEquivalence:
    """BEM-style equivalence from a local Hugging Face sequence-classification model (label 1 = equivalent).

    The input is ``[CLS] candidate [SEP] reference [SEP] question [SEP]`` as in BEM; the weights must be a
    PyTorch port on disk (the original TF-Hub model is not reachable offline).
    """

    def __init__(self, model_path: str) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_path).eval()

    def __call__(self, question: str, reference: str, candidate: str) -> float:
        """Probability that ``candidate`` is equivalent to ``reference`` for ``question``."""
        import torch

        sep = self.tokenizer.sep_token or " "
        inputs = self.tokenizer(
            candidate, f"{reference} {sep} {question}", truncation=True, return_tensors="pt"
        )
        with torch.no_grad():
            logits = self.model(**inputs).logits[0]  # (num_labels,)
        return float(torch.softmax(logits, dim=-1)[1])


@functools.cache
def load_equivalence(model_path: str) -> AnswerEquivalence:
    """The equivalence model at ``model_path``, loaded once per process."""
    return HFAnswerEquivalence(model_path)
