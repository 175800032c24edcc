"""MEMORA's factor evidence graph (section 3.8) and factor-aware document score (3.9, text lost).

The graph is bipartite: an edge (d_j, f_k) carries the normalised factor score a_jk = raw / scale in
[0, 1] and the extracted snippet u_jk (section 3.8). ragym's reading of the lost section 3.9, with the
paper's weights (lambda_u, lambda_c, lambda_v, lambda_r) = (0.4, 0.3, 0.2, 0.1) and lambda_m = 0.1::

    U_j = sum_k pi'_k a_jk                          factor utility, priorities pi' summing to 1
    C_j = |{k : a_jk >= tau_c}| / |factors|        factor coverage
    V_j = 1 - (rank in the judge's order) / L      meta-verdict (0 when not judged; L = judged count)
    R_j = max(0, 1 - rank_j / K_0)                 first-stage (or subquery) rank, 0-based
    S_j = (1 - lambda_m) (lu U_j + lc C_j + lv V_j + lr R_j) + lambda_m M_j

M_j is the memory document prior (``ragym.envs.memora.memory.document_prior``) and pi'_k the policy's
priorities reweighted by the memory factor prior: pi'_k ~ pi_k (1 + gamma h_k) / (1 + gamma l_k).
Ranks, not raw scores, feed R_j because subquery hits and first-stage hits come on different scales.

>>> g = EvidenceGraph()
>>> g.add(0, 0, 0.8, "melts"); g.weight(0, 0), g.weight(1, 0)
(0.8, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScoreWeights:
    """The lambda weights of the factor-aware score and its two thresholds."""

    lambda_u: float = 0.4
    """Weight of factor utility U_j (paper: 0.4)."""
    lambda_c: float = 0.3
    """Weight of factor coverage C_j (paper: 0.3)."""
    lambda_v: float = 0.2
    """Weight of the meta-verdict V_j (paper: 0.2)."""
    lambda_r: float = 0.1
    """Weight of the retriever rank score R_j (paper: 0.1)."""
    lambda_m: float = 0.1
    """Weight of the memory document prior M_j (paper: lambda_m = 0.1)."""
    coverage_threshold: float = 0.5
    """tau_c: a factor covers a document when its normalised score reaches this (ragym's choice)."""
    factor_prior_gamma: float = 1.0
    """gamma of the memory factor prior reweighting (0 turns the factor prior off; ragym's choice)."""


class EvidenceGraph:
    """Edges (document index, factor index) -> (normalised score, snippet); a later extraction replaces one."""

    def __init__(self) -> None:
        self.edges: dict[tuple[int, int], tuple[float, str]] = {}

    def add(self, doc: int, factor: int, weight: float, snippet: str) -> None:
        """Set edge (doc, factor); ``weight`` must already be in [0, 1]."""
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"edge weight must be in [0, 1], got {weight}")
        self.edges[(doc, factor)] = (weight, snippet)

    def weight(self, doc: int, factor: int) -> float:
        """a_jk, 0 when there is no edge."""
        return self.edges.get((doc, factor), (0.0, ""))[0]

    def matrix(self, num_docs: int, num_factors: int) -> np.ndarray:
        """The (num_docs, num_factors) matrix of edge weights."""
        a = np.zeros((num_docs, num_factors))  # (D, F)
        for (d, f), (w, _) in self.edges.items():
            if d < num_docs and f < num_factors:
                a[d, f] = w
        return a


def adjusted_priorities(
    priorities: Sequence[float], priors: Sequence[tuple[int, int]], gamma: float
) -> np.ndarray:
    """pi'_k: priorities (clipped at 0) times the memory factor prior, normalised to sum 1 (uniform if all 0)."""
    p = np.clip(np.asarray(priorities, dtype=float), 0.0, None)  # (F,)
    boost = (
        np.array([(1 + gamma * helped) / (1 + gamma * hurt) for helped, hurt in priors])
        if priors
        else np.ones_like(p)
    )
    p = p * boost
    return p / p.sum() if p.sum() > 0 else np.full(len(p), 1.0 / max(len(p), 1))


def judge_scores(order: Sequence[int], num_docs: int) -> np.ndarray:
    """V_j from a listwise verdict (document indices, best first)."""
    v = np.zeros(num_docs)  # (D,)
    for rank, d in enumerate(order):
        v[d] = 1.0 - rank / len(order)
    return v


def rank_scores(ranks: Sequence[int], depth: int) -> np.ndarray:
    """R_j = max(0, 1 - rank / depth) from 0-based retrieval ranks."""
    return np.clip(1.0 - np.asarray(ranks, dtype=float) / depth, 0.0, None)


def document_scores(
    graph: EvidenceGraph,
    priorities: np.ndarray,
    verdict: np.ndarray,
    retrieval: np.ndarray,
    memory: np.ndarray,
    w: ScoreWeights,
) -> np.ndarray:
    """S_j for every pool document (see the module docstring); arrays are (D,) except priorities (F,)."""
    num_docs, num_factors = len(retrieval), len(priorities)
    if num_factors:
        a = graph.matrix(num_docs, num_factors)  # (D, F)
        utility = a @ priorities
        coverage = (a >= w.coverage_threshold).mean(axis=1)
    else:
        utility = coverage = np.zeros(num_docs)
    base = w.lambda_u * utility + w.lambda_c * coverage + w.lambda_v * verdict + w.lambda_r * retrieval
    return (1 - w.lambda_m) * base + w.lambda_m * memory


def final_order(scores: np.ndarray, retrieval_ranks: Sequence[int]) -> list[int]:
    """Document indices by score, ties broken by retrieval rank (then index): a total, stable order."""
    return sorted(range(len(scores)), key=lambda j: (-scores[j], retrieval_ranks[j], j))


def controller_signals(
    scores: np.ndarray, order: list[int], coverage: np.ndarray, k: int
) -> dict[str, float]:
    """What the adaptive controller reads: the top-K boundary margin and the top-K evidence support."""
    if not order:  # a first stage that found nothing (BM25 drops documents sharing no term)
        return {"margin": 0.0, "support": 0.0}
    top = order[:k]
    margin = float(scores[order[k - 1]] - scores[order[k]]) if len(order) > k else float(scores[order[-1]])
    return {"margin": round(margin, 4), "support": round(float(np.mean(coverage[top])) if top else 0.0, 4)}


def coverage_of(graph: EvidenceGraph, num_docs: int, num_factors: int, threshold: float) -> np.ndarray:
    """C_j for every document."""
    if not num_factors:
        return np.zeros(num_docs)
    return (graph.matrix(num_docs, num_factors) >= threshold).mean(axis=1)
