"""DocMemo page belief memory: one Beta-Bernoulli posterior per page, with neighbour propagation.

The equations are those of issue 6 (the seed text lost them). Pages are 0-based here; the env
converts to the 1-based page numbers the policy and MMLongBench-Doc use.

>>> b = PageBeliefs([0.0, 1.0, 0.5], kappa=2.0, radius=1, decay=0.5)
>>> b.alpha.tolist(), b.beta.tolist()
([1.0, 3.0, 2.0], [3.0, 1.0, 2.0])
>>> b.update(useful=[0], irrelevant=[2])
>>> b.alpha.tolist(), b.beta.tolist()
([2.0, 3.5, 2.0], [3.0, 1.0, 3.0])
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np


def minmax_normalise(values: Sequence[float] | np.ndarray, constant: float = 0.5) -> np.ndarray:
    """Scale ``values`` to [0, 1]; a constant vector maps to ``constant`` (no page is preferred)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"similarities must be a non-empty 1-D sequence, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("similarities contain NaN or infinity")
    low, high = float(v.min()), float(v.max())
    if high - low <= 0.0:
        return np.full_like(v, constant)
    return (v - low) / (high - low)


def lambda_schedule(t: int, lambda_0: float, eta: float) -> float:
    """Weight of current-query similarity in round ``t`` (0-based): ``lambda_0 * eta ** t``."""
    if t < 0:
        raise ValueError(f"round index must be >= 0, got {t}")
    return float(lambda_0 * eta**t)


def top_k_fresh_first(
    pages: Sequence[int], scores: Sequence[float] | np.ndarray, k: int, stale: Collection[int] = ()
) -> list[int]:
    """The ``k`` best ``pages`` by score, taking pages outside ``stale`` first; stale ones only fill up.

    Returned best first (ties: lower page first), so a fill-up page may precede a fresh one.

    >>> top_k_fresh_first([1, 2, 3, 4], [0.9, 0.8, 0.1, 0.5], k=2, stale={1})
    [2, 4]
    >>> top_k_fresh_first([1, 2, 3, 4], [0.9, 0.8, 0.1, 0.5], k=3, stale={1, 2, 4})
    [1, 2, 3]
    """
    if len(pages) != len(scores):
        raise ValueError(f"{len(pages)} pages but {len(scores)} scores")
    order = sorted(range(len(pages)), key=lambda i: (-float(scores[i]), pages[i]))
    fresh = [i for i in order if pages[i] not in stale][:k]
    chosen = set(fresh) | set([i for i in order if pages[i] in stale][: k - len(fresh)])
    return [pages[i] for i in order if i in chosen]


class PageBeliefs:
    """Per-page Beta(alpha, beta) relevance beliefs for one question over one document."""

    def __init__(
        self,
        similarity: Sequence[float] | np.ndarray,
        kappa: float = 2.0,
        radius: int = 1,
        decay: float = 0.5,
    ) -> None:
        """Prior from first-round similarity ``c`` in [0, 1]: alpha = 1 + kappa c, beta = 1 + kappa (1 - c)."""
        c = np.asarray(similarity, dtype=np.float64)
        if c.ndim != 1 or c.size == 0:
            raise ValueError(f"similarity must be a non-empty 1-D sequence, got shape {c.shape}")
        if np.any(c < 0.0) or np.any(c > 1.0) or not np.all(np.isfinite(c)):
            raise ValueError("similarity must lie in [0, 1]; normalise it first (minmax_normalise)")
        if kappa < 0 or radius < 0 or not 0.0 <= decay <= 1.0:
            raise ValueError(f"need kappa >= 0, radius >= 0, 0 <= decay <= 1; got {kappa}, {radius}, {decay}")
        self.kappa, self.radius, self.decay = float(kappa), int(radius), float(decay)
        self.alpha: np.ndarray = 1.0 + self.kappa * c  # (N,)
        self.beta: np.ndarray = 1.0 + self.kappa * (1.0 - c)  # (N,)

    @property
    def num_pages(self) -> int:
        """Number of pages N."""
        return int(self.alpha.size)

    def _indices(self, pages: Iterable[int], name: str) -> np.ndarray:
        idx = np.unique(np.asarray(list(pages), dtype=np.int64))
        if idx.size and (idx[0] < 0 or idx[-1] >= self.num_pages):
            raise ValueError(f"{name} pages {idx.tolist()} fall outside 0..{self.num_pages - 1}")
        return idx

    def update(self, useful: Iterable[int], irrelevant: Iterable[int]) -> None:
        """Feedback of one round: +1 alpha on useful, +1 beta on irrelevant, decayed alpha to useful's neighbours."""
        u = self._indices(useful, "useful")
        v = self._indices(irrelevant, "irrelevant")
        both = np.intersect1d(u, v)
        if both.size:
            raise ValueError(f"pages {both.tolist()} are marked both useful and irrelevant")
        self.alpha[u] += 1.0
        self.beta[v] += 1.0
        # Neighbourhoods of several useful pages overlap: np.add.at accumulates repeated indices.
        # Negative feedback is not propagated, so nearby pages of an irrelevant one stay explorable.
        # Distances past the document's length reach no page: a radius beyond it stops there.
        for d in range(1, min(self.radius, self.num_pages - 1) + 1):
            weight = self.decay**d
            for j in (u - d, u + d):
                j = j[(j >= 0) & (j < self.num_pages)]
                np.add.at(self.alpha, j, weight)

    def mean(self) -> np.ndarray:
        """Posterior means mu_i = alpha_i / (alpha_i + beta_i), shape (N,)."""
        return self.alpha / (self.alpha + self.beta)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One Thompson draw theta_i ~ Beta(alpha_i, beta_i), shape (N,)."""
        return rng.beta(self.alpha, self.beta)
