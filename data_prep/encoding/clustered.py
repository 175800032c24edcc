"""Clustered synthetic vectors with the neighbour structure of real embeddings (for index benchmarks and tests).

Uniform random vectors have no structure an index can use, and every point is nearly equidistant from every
other. Real text and image embeddings instead sit near a low-dimensional subspace with a decaying spectrum and
form clusters of varied, elongated shapes. ``clustered_vectors`` draws exactly that:

- a latent space of ``rank`` dimensions mapped into ``dim`` by a random orthonormal basis, latent axis ``j``
  scaled by ``(j + 1) ** -spectrum_decay`` (a power-law spectrum);
- ``num_clusters`` Gaussian clusters in the latent space: centres ~ N(0, I), each cluster with its own
  per-axis spread ``cluster_spread * exp(N(0, anisotropy))`` (anisotropic, different per cluster), sizes
  drawn from a Zipf-like law so a few topics are large;
- isotropic Gaussian noise over all ``dim`` dimensions carrying ``noise_fraction`` of the energy;
- rows L2-normalised, as every ragym index stores them.

Rows are generated in blocks from per-block seeds, so any block can be drawn without the ones before it.

This make-up is kept as the named preset ``gaussian128``. Measured beside real text embeddings
(``benchmarks/embedding_stats.py``), its neighbour gaps and local intrinsic dimensionality are like theirs, but
its spectrum is far steeper (13 axes hold half its variance; all-MiniLM-L6-v2 needs 43 of 384). The default
make-up, ``hierarchical`` (``ragym.data_prep.encoding.hierarchical``), is fitted to all of those statistics.
``make_generator(name)`` builds either.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ragym.data_prep.encoding.hierarchical import HierarchicalSpec, HierarchicalVectors


@dataclass(frozen=True)
class ClusteredSpec:
    """The make-up of a clustered synthetic vector set."""

    dim: int = 768
    """Ambient dimension (E5-base, EVA-CLIP halves: 768)."""
    rank: int = 128
    """Latent dimensions carrying the cluster structure."""
    spectrum_decay: float = 0.5
    """Latent axis j is scaled by (j + 1) ** -decay."""
    num_clusters: int = 2000
    """Topics / entity families."""
    cluster_spread: float = 0.6
    """Typical within-cluster standard deviation relative to the spread of centres (1.0)."""
    anisotropy: float = 0.5
    """Log-normal sigma of each cluster's per-axis spread (0 = spherical clusters)."""
    noise_fraction: float = 0.1
    """Share of each vector's energy in isotropic noise over all ``dim`` dimensions."""
    seed: int = 0
    """Seed of the basis, centres and spreads (blocks add their own index)."""


class ClusteredVectors:
    """A reproducible stream of clustered vectors (float32, unit norm)."""

    def __init__(self, spec: ClusteredSpec = ClusteredSpec()) -> None:
        rng = np.random.default_rng(spec.seed)
        self.spec = spec
        basis, _ = np.linalg.qr(
            rng.standard_normal((spec.dim, spec.rank))
        )  # (dim, rank), orthonormal columns
        scale = (np.arange(spec.rank) + 1.0) ** -spec.spectrum_decay  # (rank,)
        self.mixing = (basis * scale).T.astype(np.float32)  # (rank, dim)
        self.centres = rng.standard_normal((spec.num_clusters, spec.rank)).astype(np.float32)
        self.spreads = (
            spec.cluster_spread
            * np.exp(spec.anisotropy * rng.standard_normal((spec.num_clusters, spec.rank)))
        ).astype(np.float32)
        weights = 1.0 / (np.arange(spec.num_clusters) + 10.0)  # Zipf-like topic sizes
        self.weights = weights / weights.sum()
        signal = float(np.mean(np.sum((self.centres**2 + self.spreads**2) * scale**2, axis=1)))
        # isotropic noise std such that noise energy / total energy = noise_fraction
        self.noise_std = float(np.sqrt(spec.noise_fraction / (1 - spec.noise_fraction) * signal / spec.dim))

    def block(self, index: int, size: int) -> np.ndarray:
        """Block ``index`` of ``size`` rows: (size, dim) float32, unit norm; the same for the same arguments."""
        rng = np.random.default_rng([self.spec.seed, index])
        clusters = rng.choice(self.spec.num_clusters, size=size, p=self.weights)
        latent = self.centres[clusters] + self.spreads[clusters] * rng.standard_normal(
            (size, self.spec.rank), dtype=np.float32
        )  # (size, rank)
        out = latent @ self.mixing  # (size, dim)
        out += self.noise_std * rng.standard_normal((size, self.spec.dim), dtype=np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def blocks(self, num: int, block_size: int = 65536) -> Iterator[np.ndarray]:
        """``num`` rows as consecutive blocks."""
        for index, start in enumerate(range(0, num, block_size)):
            yield self.block(index, min(block_size, num - start))


MAKE_UPS: dict[str, tuple[Any, type]] = {
    "hierarchical": (HierarchicalSpec(), HierarchicalVectors),
    "gaussian128": (ClusteredSpec(), ClusteredVectors),
}
"""Named make-ups of synthetic embeddings: (spec, generator class); the first is the default."""


def make_generator(name: str = "hierarchical", **changes: Any) -> ClusteredVectors | HierarchicalVectors:
    """The generator of make-up ``name``, its spec's fields replaced by ``changes`` (e.g. ``dim=384``)."""
    if name not in MAKE_UPS:
        raise ValueError(f"unknown make-up {name!r}; expected one of {sorted(MAKE_UPS)}")
    spec, cls = MAKE_UPS[name]
    return cls(replace(spec, **changes))
