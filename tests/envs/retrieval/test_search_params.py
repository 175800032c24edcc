"""Recorded search parameters reach the part of a loaded faiss index they belong to (a faiss file keeps none)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from ragym.envs.retrieval.retrievers import set_search_params


def _loaded(factory: str) -> faiss.Index:
    vectors = np.random.default_rng(0).standard_normal((400, 32)).astype(np.float32)
    index = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    return faiss.deserialize_index(faiss.serialize_index(index))


def test_nprobe_k_factor_and_query_bits_reach_a_refine_step_and_an_ivf_rabitq_behind_a_transform() -> None:
    index = _loaded("PCA24,IVF4,RaBitQ3,Refine(SQ8)")
    refine = faiss.downcast_index(index)  # the factory nests Refine(PreTransform(PCA, IVF))
    ivf = faiss.downcast_index(faiss.downcast_index(refine.base_index).index)
    assert (refine.k_factor, ivf.nprobe, ivf.qb) == (1, 1, 4)  # what read_index gives
    set_search_params(index, {"nprobe": 3, "k_factor": 6, "query_bits": 8})
    assert (refine.k_factor, ivf.nprobe, ivf.qb) == (6, 3, 8)
    inner = _loaded("PCA24,IVF4,PQ4x4")  # a transform without a refine step
    set_search_params(inner, {"nprobe": 2})
    assert faiss.downcast_index(faiss.downcast_index(inner).index).nprobe == 2


def test_parameters_an_index_lacks_are_skipped_and_unknown_ones_refused() -> None:
    flat = _loaded("Flat")
    set_search_params(flat, {"nprobe": 3, "k_factor": 6, "query_bits": 8})  # nothing to set on a flat index
    ivf = _loaded("IVF4,PQ4x4")
    set_search_params(ivf, {"nprobe": 2})
    assert faiss.downcast_index(ivf).nprobe == 2
    with pytest.raises(ValueError, match="unknown search parameters \\['efSearch'\\]"):
        set_search_params(ivf, {"efSearch": 8})
