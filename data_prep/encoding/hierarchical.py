"""Hierarchical synthetic vectors calibrated to the neighbour statistics of real text embeddings.

``benchmarks/embedding_stats.py`` measures all-MiniLM-L6-v2 embeddings of 30,000 offline prose paragraphs and
prints them beside this generator's at the same size: the defaults below were fitted to them (1st / 15th
neighbour similarity 0.65 / 0.49, 15th-16th gap 0.0031, Levina-Bickel LID 17.5; the PCA spectrum stretched
from 384 to 768 axes), erring where they differ towards neighbours that are harder to keep apart (a flatter
spectrum, and 15th neighbours relatively nearer than the 1st than in MiniLM). ``HierarchicalVectors`` draws, in a
``dim``-d space:

- a global latent space of ``rank`` axes (random orthonormal basis), axis ``j`` scaled by
  ``(j + 1 + spectrum_offset) ** -spectrum_decay``: every direction below is drawn in it, so the global
  spectrum has that shape;
- ``num_topics`` topic centres, and ``num_subtopics`` sub-topic centres each at ``subtopic_spread`` from its
  topic's centre (topic and sub-topic sizes Zipf-like);
- each item = its sub-topic's centre + variation along ``local_rank`` directions of that sub-topic (a
  low-rank local subspace, axis ``i`` scaled by ``(i + 1) ** -local_decay``, the sub-topic's own overall
  scale log-normal around ``item_spread``), drawn from a shared pool so that no per-sub-topic basis is stored;
- isotropic noise over all ``dim`` axes with ``noise_fraction`` of the energy (the small isotropic tail);
- rows L2-normalised.

Blocks are drawn from per-block seeds, so any block can be drawn without the ones before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

CHUNK = 4096  # rows whose local directions are gathered at once: CHUNK * local_rank * dim floats


@dataclass(frozen=True)
class HierarchicalSpec:
    """The make-up of a hierarchical synthetic vector set (topics -> sub-topics -> items)."""

    dim: int = 768
    """Ambient dimension (E5-base, EVA-CLIP halves: 768)."""
    rank: int = 0
    """Global latent axes; every centre and local direction lies in their span (0: all ``dim`` axes, so the
    spectrum decays smoothly over the whole width instead of stopping at a rank)."""
    spectrum_decay: float = 0.825
    """Global latent axis j is scaled by (j + 1 + spectrum_offset) ** -decay."""
    spectrum_offset: float = 120.0
    """Flattens the head of the spectrum (real embeddings: no few dominant axes, a steep tail)."""
    num_topics: int = 1000
    """Top-level clusters."""
    num_subtopics: int = 5000
    """Second-level clusters, spread over the topics with Zipf-like sizes."""
    subtopic_spread: float = 0.5
    """Distance scale of a sub-topic centre from its topic's centre (topic centres have scale 1)."""
    item_spread: float = 0.9
    """Typical scale of an item's local variation around its sub-topic's centre."""
    spread_sigma: float = 0.8
    """Log-normal sigma of each sub-topic's own local scale."""
    local_rank: int = 32
    """Directions of each sub-topic's local subspace."""
    local_decay: float = 0.3
    """Local direction i is scaled by (i + 1) ** -local_decay."""
    pool_size: int = 4096
    """Shared directions that sub-topics draw their local subspaces from."""
    noise_fraction: float = 0.08
    """Share of each vector's energy in isotropic noise over all ``dim`` axes."""
    seed: int = 0
    """Seed of the basis, centres and subspaces (blocks add their own index)."""


def _zipf(num: int, offset: float) -> np.ndarray:
    weights = 1.0 / (np.arange(num) + offset)
    return weights / weights.sum()


class HierarchicalVectors:
    """A reproducible stream of hierarchical clustered vectors (float32, unit norm)."""

    def __init__(self, spec: HierarchicalSpec = HierarchicalSpec()) -> None:
        rng = np.random.default_rng(spec.seed)
        self.spec = spec
        rank = spec.rank or spec.dim
        basis, _ = np.linalg.qr(rng.standard_normal((spec.dim, rank)))  # (dim, rank)
        scale = (np.arange(rank) + 1.0 + spec.spectrum_offset) ** -spec.spectrum_decay  # (rank,)
        mixing = (basis * scale).T  # (rank, dim)
        topics = rng.standard_normal((spec.num_topics, rank)) @ mixing  # (topics, dim)
        norm = np.sqrt(np.mean(np.sum(topics**2, axis=1)))  # topic centres: unit scale on average
        topics /= norm
        parent = rng.choice(spec.num_topics, size=spec.num_subtopics, p=_zipf(spec.num_topics, 5.0))
        offsets = rng.standard_normal((spec.num_subtopics, rank)) @ mixing / norm
        self.centres = (topics[parent] + spec.subtopic_spread * offsets).astype(np.float32)  # (sub, dim)
        pool = rng.standard_normal((spec.pool_size, rank)) @ mixing  # (pool, dim)
        self.pool = (pool / np.linalg.norm(pool, axis=1, keepdims=True)).astype(np.float32)
        self.members = rng.integers(0, spec.pool_size, size=(spec.num_subtopics, spec.local_rank))
        local = (np.arange(spec.local_rank) + 1.0) ** -spec.local_decay
        local /= np.sqrt(np.sum(local**2))  # an item's local offset has norm ~ its sub-topic's scale
        spread = spec.item_spread * np.exp(spec.spread_sigma * rng.standard_normal(spec.num_subtopics))
        self.axis_scales = (spread[:, None] * local).astype(np.float32)  # (sub, local_rank)
        # sub-topic popularity: a Zipf law over a random order, so popular ones sit in every topic
        self.weights = _zipf(spec.num_subtopics, 10.0)[rng.permutation(spec.num_subtopics)]
        signal = float(
            np.mean(np.sum(self.centres**2, axis=1)) + np.mean(np.sum(self.axis_scales**2, axis=1))
        )
        # isotropic noise std such that noise energy / total energy = noise_fraction
        self.noise_std = float(np.sqrt(spec.noise_fraction / (1 - spec.noise_fraction) * signal / spec.dim))

    def block(self, index: int, size: int) -> np.ndarray:
        """Block ``index`` of ``size`` rows: (size, dim) float32, unit norm; the same for the same arguments."""
        spec = self.spec
        rng = np.random.default_rng([spec.seed, index])
        sub = rng.choice(spec.num_subtopics, size=size, p=self.weights)
        coords = rng.standard_normal((size, spec.local_rank), dtype=np.float32) * self.axis_scales[sub]
        out = self.centres[sub]  # (size, dim), a copy
        for start in range(0, size, CHUNK):
            stop = min(size, start + CHUNK)
            directions = self.pool[self.members[sub[start:stop]]]  # (chunk, local_rank, dim)
            out[start:stop] += np.einsum("nr,nrd->nd", coords[start:stop], directions)
        out += self.noise_std * rng.standard_normal((size, spec.dim), dtype=np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def blocks(self, num: int, block_size: int = 65536) -> Iterator[np.ndarray]:
        """``num`` rows as consecutive blocks."""
        for index, start in enumerate(range(0, num, block_size)):
            yield self.block(index, min(block_size, num - start))
