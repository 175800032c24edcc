"""Exact search on torch (a flat index on a GPU under faiss-cpu) ranks as faiss's flat index does; run here on CPU."""

from __future__ import annotations

import logging
from pathlib import Path

import faiss
import numpy as np
import pytest

from ragym.envs.retrieval import torch_flat
from ragym.envs.retrieval.retrievers import DiskRefinedIndex, FaissRetriever, normalise, page
from ragym.envs.retrieval.service import shards
from ragym.envs.retrieval.service.shards import ShardedRetriever, split_into_shards, to_gpu
from ragym.envs.retrieval.torch_flat import TorchFlatIndex


def flat(vectors: np.ndarray) -> faiss.IndexFlatIP:
    """faiss's own exact search over ``vectors``."""
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def tied_vectors(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(60 rows, 8 queries) of entries in {-1, 0, 1}: every score is an exact small integer, so many rows tie
    and no summation order can split a tie."""
    rng = np.random.default_rng(seed)
    distinct = rng.integers(-1, 2, size=(6, 4)).astype(np.float32)
    return distinct[rng.integers(0, 6, size=60)], rng.integers(-1, 2, size=(8, 4)).astype(np.float32)


def test_the_same_hits_and_scores_as_faiss_flat() -> None:
    """Random vectors, no ties: the rows of faiss's IndexFlatIP, scores to float rounding, for several k."""
    rng = np.random.default_rng(0)
    vectors, queries = normalise(rng.normal(size=(500, 32))), normalise(rng.normal(size=(20, 32)))
    index = TorchFlatIndex.from_faiss(flat(vectors), "cpu")
    assert (index.ntotal, index.d) == (500, 32)
    for k in (1, 10, 64):
        got_scores, got_rows = index.search(queries, k)
        want_scores, want_rows = flat(vectors).search(queries, k)
        np.testing.assert_array_equal(got_rows, want_rows)
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)


def test_ties_go_to_the_lower_row_whatever_k_is_asked() -> None:
    """Among equal scores the lower row ranks first, so every k returns a prefix of the longest ranking (exact
    paging) and that ranking is sort by (-score, row)."""
    vectors, queries = tied_vectors(seed=1)
    index = TorchFlatIndex(vectors, "cpu")
    exact = queries @ vectors.T  # (8, 60), exact integers
    want = np.array([sorted(range(60), key=lambda r, q=q: (-exact[q, r], r)) for q in range(8)])
    _, longest = index.search(queries, 60)
    np.testing.assert_array_equal(longest, want)
    for k in (1, 3, 7, 11, 25):
        scores, rows = index.search(queries, k)
        np.testing.assert_array_equal(rows, want[:, :k])
        np.testing.assert_array_equal(scores, np.take_along_axis(exact, want[:, :k], axis=1))


def test_a_page_of_a_tied_ranking_is_its_slice() -> None:
    """``page`` asks for offset + size hits and keeps the tail: the pages tile the ranking without overlap."""
    vectors, queries = tied_vectors(seed=2)
    retriever = FaissRetriever(TorchFlatIndex(vectors, "cpu"), [f"d{i}" for i in range(60)])
    whole = [h.docid for h in retriever.search(queries[0], 60)]
    pages = [h.docid for offset in range(0, 60, 7) for h in page(retriever, queries[0], offset, 7)]
    assert pages == whole


def test_query_chunks_and_short_indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries one at a time (a tiny score budget) give the same answer; past ntotal, rows are -1."""
    vectors, queries = tied_vectors(seed=3)
    whole = TorchFlatIndex(vectors, "cpu").search(queries, 12)
    monkeypatch.setattr(torch_flat, "SCORE_BYTES", 1)
    chunked = TorchFlatIndex(vectors, "cpu").search(queries, 12)
    for got, want in zip(chunked, whole, strict=True):
        np.testing.assert_array_equal(got, want)
    scores, rows = TorchFlatIndex(vectors[:5], "cpu").search(queries, 8)
    assert (rows[:, 5:] == -1).all() and (rows[:, :5] >= 0).all() and np.isfinite(scores).all()


@pytest.fixture
def cpu_for_cuda(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``to_gpu``'s torch index built on the CPU; the devices it asked for are recorded."""
    asked: list[str] = []

    def on_cpu(index: faiss.Index, device: str) -> TorchFlatIndex:
        asked.append(device)
        return TorchFlatIndex(index.reconstruct_n(0, index.ntotal), "cpu")

    monkeypatch.setattr(shards.TorchFlatIndex, "from_faiss", staticmethod(on_cpu))
    return asked


def test_a_flat_shard_moves_to_torch_and_searches_as_before(tmp_path: Path, cpu_for_cuda: list[str]) -> None:
    """A sharded flat manifest loaded with ``gpu=1``: each shard's index is torch exact search on cuda:1, with
    the hits the CPU shards give."""
    rng = np.random.default_rng(5)
    vectors = normalise(rng.normal(size=(300, 16)))
    manifest = split_into_shards(vectors, [f"d{i}" for i in range(300)], 3, tmp_path / "shards")
    on_cpu, on_gpu = ShardedRetriever.from_manifest(manifest), ShardedRetriever.from_manifest(manifest, gpu=1)
    assert cpu_for_cuda == ["cuda:1"] * 3 and on_gpu.dim == 16
    assert all(isinstance(shard.index, TorchFlatIndex) for shard in on_gpu.shards)
    queries = list(vectors[:6] + 0.01)
    got, want = on_gpu.batch_search(queries, 9), on_cpu.batch_search(queries, 9)
    assert [[h.docid for h in hits] for hits in got] == [[h.docid for h in hits] for hits in want]


def test_a_disk_refine_over_flat_moves_its_base(cpu_for_cuda: list[str]) -> None:
    """A refine step keeps its vectors on the host; its flat base moves."""
    vectors = normalise(np.random.default_rng(6).normal(size=(50, 8)))
    moved = to_gpu(DiskRefinedIndex(flat(vectors), vectors, k_factor=2), 0)
    assert isinstance(moved, DiskRefinedIndex) and isinstance(moved.base, TorchFlatIndex)
    assert moved.vectors is vectors and moved.k_factor == 2 and cpu_for_cuda == ["cuda:0"]


def test_an_hnsw_index_stays_on_the_cpu_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """faiss-cpu cannot move an HNSW graph: it is searched where it is, with one warning naming it."""
    if hasattr(faiss, "StandardGpuResources"):
        pytest.skip("this faiss has a GPU build: other kinds move with it")
    index = faiss.IndexHNSWFlat(8, 16, faiss.METRIC_INNER_PRODUCT)
    index.add(normalise(np.random.default_rng(7).normal(size=(40, 8))))
    with caplog.at_level(logging.WARNING, logger=shards.__name__):
        assert to_gpu(index, 0) is index
    assert [r.getMessage() for r in caplog.records] == [
        "IndexHNSWFlat of 40 vectors searches on the CPU: this faiss has no GPU build (only flat inner-product "
        "indexes move to GPU 0, as exact search on torch)"
    ]
