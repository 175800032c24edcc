"""Synthetic embedding make-ups: reproducible blocks, named presets, and the knobs that set the neighbour
structure (local rank -> local intrinsic dimensionality)."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.data_prep.encoding.clustered import MAKE_UPS, ClusteredVectors, make_generator
from ragym.data_prep.encoding.hierarchical import HierarchicalSpec, HierarchicalVectors
from ragym.data_prep.encoding.neighbour_stats import neighbours

SMALL = HierarchicalSpec(dim=64, num_topics=20, num_subtopics=200, pool_size=256, noise_fraction=0.0)


def test_blocks_are_reproducible_independent_and_unit_norm() -> None:
    first, again = HierarchicalVectors(SMALL), HierarchicalVectors(SMALL)
    block = first.block(3, 500)
    assert block.shape == (500, 64) and block.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(block, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(block, again.block(3, 500))  # without drawing blocks 0-2 first
    assert not np.allclose(block, first.block(2, 500))
    rows = np.concatenate(list(first.blocks(1200, block_size=500)))
    np.testing.assert_array_equal(rows[1000:], first.block(2, 200))


def test_make_ups_are_named_presets() -> None:
    assert list(MAKE_UPS) == ["hierarchical", "gaussian128"]  # the first is the default
    assert isinstance(make_generator(), HierarchicalVectors)
    old = make_generator("gaussian128", dim=256)
    assert isinstance(old, ClusteredVectors) and old.spec.rank == 128 and old.block(0, 4).shape == (4, 256)
    with pytest.raises(ValueError, match="unknown make-up 'uniform'"):
        make_generator("uniform")


def test_local_rank_sets_the_local_intrinsic_dimensionality() -> None:
    """Items vary along local_rank directions of their sub-topic: the LID estimate follows that rank."""
    lids = {}
    for rank in (2, 12):
        gen = HierarchicalVectors(
            HierarchicalSpec(**{**SMALL.__dict__, "local_rank": rank, "local_decay": 0.0})
        )
        vectors = np.concatenate(list(gen.blocks(20_000)))
        lids[rank] = neighbours(vectors, k=15, num_queries=500).lid
    assert lids[2] < 3.0
    assert lids[12] > 2 * lids[2]


# all-MiniLM-L6-v2 over 30,000 offline prose paragraphs, 2,000 query rows (benchmarks/embedding_stats.py)
MINILM_30K = {"sim_first": 0.652, "sim_kth": 0.491, "gap": 0.0031, "lid": 17.5}


def test_the_default_make_up_keeps_real_embeddings_neighbour_statistics() -> None:
    """The calibration, held: at the same size the default make-up's neighbours sit where MiniLM's do."""
    stats = neighbours(np.concatenate(list(make_generator().blocks(30_000))), num_queries=1000)
    assert stats.sim_first == pytest.approx(MINILM_30K["sim_first"], abs=0.04)
    assert stats.sim_kth == pytest.approx(MINILM_30K["sim_kth"], abs=0.03)
    assert stats.gap == pytest.approx(MINILM_30K["gap"], rel=0.25)
    assert stats.lid == pytest.approx(MINILM_30K["lid"], rel=0.15)
