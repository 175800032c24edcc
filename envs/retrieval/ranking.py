"""Retrieval metrics over TREC-style dicts: ``run[qid][docid] = score``, ``qrels[qid][docid] = relevance``.

Rankings follow trec_eval (and so pytrec-eval-terrier): score descending, ties broken by docid descending.
Only queries present in both ``run`` and ``qrels`` get a value, as in trec_eval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]


def _ranked(scores: Mapping[str, float]) -> list[str]:
    """Doc ids in trec_eval order: score descending, then docid descending."""
    return [docid for docid, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")


def ndcg_at_k(run: Run, qrels: Qrels, k: int = 10) -> dict[str, float]:
    """Per-query nDCG@k with linear gains and log2 discounts (trec_eval ``ndcg_cut.k``).

    >>> ndcg_at_k({"q": {"a": 2.0, "b": 1.0}}, {"q": {"b": 1}}, k=10)
    {'q': 0.6309297535714575}
    """
    _check_k(k)
    result: dict[str, float] = {}
    for qid, scores in run.items():
        if qid not in qrels:
            continue
        judged = qrels[qid]
        dcg = sum(
            judged.get(docid, 0) / math.log2(rank + 2)
            for rank, docid in enumerate(_ranked(scores)[:k])
            if judged.get(docid, 0) > 0
        )
        ideal_gains = sorted((rel for rel in judged.values() if rel > 0), reverse=True)[:k]
        idcg = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal_gains))
        result[qid] = dcg / idcg if idcg > 0 else 0.0
    return result


def recall_at_k(run: Run, qrels: Qrels, k: int = 10) -> dict[str, float]:
    """Per-query recall@k: the share of relevant (relevance > 0) documents ranked in the top k.

    >>> recall_at_k({"q": {"a": 2.0, "b": 1.0, "c": 0.5}}, {"q": {"b": 1, "c": 1, "d": 0}}, k=2)
    {'q': 0.5}
    """
    _check_k(k)
    result: dict[str, float] = {}
    for qid, scores in run.items():
        if qid not in qrels:
            continue
        relevant = {docid for docid, rel in qrels[qid].items() if rel > 0}
        top = set(_ranked(scores)[:k])
        result[qid] = len(relevant & top) / len(relevant) if relevant else 0.0
    return result
