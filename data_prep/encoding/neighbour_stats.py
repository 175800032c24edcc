"""Neighbour statistics of a vector set: what decides whether a compressed index can keep its top-K order.

- ``spectrum``: share of the variance in the top principal components (how fast the spectrum decays).
- ``neighbours``: for sampled rows (themselves excluded), the cosine similarity of the 1st, K-th and
  (K+1)-th nearest neighbour, the K-th/(K+1)-th gap absolute and relative to the K-th distance, and the
  Levina-Bickel maximum-likelihood local intrinsic dimensionality over the k nearest neighbours.

A compressed code perturbs each similarity by roughly a fixed amount; it keeps the top-K when the gaps
between neighbours are large against that amount. Gaussian clusters in many dimensions put every
neighbour at nearly the same distance (high intrinsic dimensionality, tiny gaps); real embeddings do not.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np


@dataclass(frozen=True)
class NeighbourStats:
    """Summary of the nearest-neighbour structure around sampled rows (means over the sampled rows)."""

    num_vectors: int
    """Rows searched."""
    num_queries: int
    """Sampled rows whose neighbours were found (each one excluded from its own list)."""
    k: int
    """K of the K-th / (K+1)-th neighbour figures."""
    sim_first: float
    """Cosine similarity of the nearest neighbour."""
    sim_kth: float
    """Cosine similarity of the K-th neighbour."""
    gap: float
    """Similarity of the K-th minus the (K+1)-th neighbour."""
    relative_gap: float
    """(d_{K+1} - d_K) / d_K in Euclidean distance: the gap a code must resolve, scale-free."""
    distance_ratio: float
    """d_K / d_1 in Euclidean distance: how much farther the K-th neighbour is than the first."""
    lid: float
    """Levina-Bickel MLE of the local intrinsic dimensionality over ``k`` neighbours (MacKay-Ghahramani
    pooling: the inverse of the mean inverse estimate)."""
    lid_wide: float
    """The same over ``k`` + 5 neighbours."""


def spectrum(vectors: np.ndarray, tops: tuple[int, ...] = (10, 50, 100)) -> dict[str, float]:
    """Share of the total variance in the top principal components, and the components for 50% / 90%."""
    centred = vectors - vectors.mean(axis=0)  # (n, d)
    cov = centred.T.astype(np.float64) @ centred / len(vectors)  # (d, d)
    eig = np.sort(np.linalg.eigvalsh(cov))[::-1].clip(min=0)
    cum = np.cumsum(eig) / eig.sum()
    out = {f"top{t}": float(cum[min(t, len(cum)) - 1]) for t in tops}
    out["pcs_for_50pct"] = int(np.searchsorted(cum, 0.5) + 1)
    out["pcs_for_90pct"] = int(np.searchsorted(cum, 0.9) + 1)
    return out


def nearest(vectors: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Inner products of ``rows``' k nearest neighbours among ``vectors`` (the row itself excluded), best first.

    faiss finds the neighbours in float32; their inner products are then recomputed in float64 from
    ``vectors``. Distances of near neighbours come from 1 - sim, where float32 keeps few digits: at 1 degree
    (sim 0.99985) one float32 rounding (6e-8) is 4e-4 of 1 - sim, and which roundings a score gets depends on
    faiss's code path (its SIMD loop or BLAS, the BLAS build and blocking), so d_K / d_1 moved by 1e-4.
    """
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    _, found = index.search(np.ascontiguousarray(vectors[rows], dtype=np.float32), k + 1)  # (Q, k+1)
    own = found == rows[:, None]
    # drop the row itself where it was found, else the last (a duplicate may outrank it)
    drop = np.where(own.any(axis=1), own.argmax(axis=1), k)
    keep = np.ones_like(own)
    keep[np.arange(len(rows)), drop] = False
    found = found[keep].reshape(len(rows), k)  # (Q, k)
    queries = vectors[rows].astype(np.float64)  # (Q, d)
    sims = np.stack(
        [np.einsum("qd,qd->q", queries, vectors[found[:, j]].astype(np.float64)) for j in range(k)], axis=1
    )  # (Q, k); one column at a time bounds the memory
    return -np.sort(-sims, axis=1)  # float32 ties and near-ties may have come in either order


def lid_mle(distances: np.ndarray) -> float:
    """Levina-Bickel MLE of intrinsic dimensionality from (Q, k) ascending neighbour distances, pooled."""
    k = distances.shape[1]
    logs = np.log(distances[:, -1:] / distances[:, :-1])  # (Q, k-1): log(T_k / T_j)
    inverse = logs.sum(axis=1) / (k - 1)  # per-row 1 / m_k(x)
    return float(1.0 / inverse.mean())


def neighbours(vectors: np.ndarray, k: int = 15, num_queries: int = 2000, seed: int = 0) -> NeighbourStats:
    """Neighbour statistics of unit-norm ``vectors`` around ``num_queries`` seeded rows."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(vectors), size=min(num_queries, len(vectors)), replace=False))
    sims = nearest(vectors, rows, k + 5)  # (Q, k+5) float64
    dist = np.sqrt(np.clip(2.0 - 2.0 * sims, 1e-12, None))  # unit vectors: |a - b|^2 = 2 - 2 a.b
    return NeighbourStats(
        num_vectors=len(vectors),
        num_queries=len(rows),
        k=k,
        sim_first=float(sims[:, 0].mean()),
        sim_kth=float(sims[:, k - 1].mean()),
        gap=float((sims[:, k - 1] - sims[:, k]).mean()),
        relative_gap=float(((dist[:, k] - dist[:, k - 1]) / dist[:, k - 1]).mean()),
        distance_ratio=float((dist[:, k - 1] / dist[:, 0]).mean()),
        lid=lid_mle(dist[:, :k]),
        lid_wide=lid_mle(dist),
    )
