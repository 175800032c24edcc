"""A compressed index re-ranked against full vectors read from disk: the reader returns exactly the stored
rows, the re-ranking is exact over the base index's candidates, and broken refine files are refused."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

from ragym.envs.retrieval.retrievers import DiskRefinedIndex, RefineVectors, normalise, set_search_params

DIM = 16


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return normalise(np.random.default_rng(0).standard_normal((600, DIM)))


def _saved(tmp_path: Path, array: np.ndarray, name: str = "v.npy") -> Path:
    np.save(tmp_path / name, array)
    return tmp_path / name


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_the_reader_returns_the_rows_asked_for_in_the_order_asked(
    tmp_path: Path, vectors: np.ndarray, dtype: type
) -> None:
    stored = vectors.astype(dtype)
    reader = RefineVectors(_saved(tmp_path, stored))
    assert reader.shape == stored.shape and reader.dtype == dtype and len(reader) == len(stored)
    rows = np.array([5, 3, 4, 5, 599, 0, 1, 2, 3])  # unsorted, repeated, with runs of neighbours
    np.testing.assert_array_equal(reader[rows], stored[rows])
    many = np.random.default_rng(1).integers(0, len(stored), size=400)
    np.testing.assert_array_equal(reader[many], stored[many])
    assert reader[np.array([], dtype=np.int64)].shape == (0, DIM)
    with pytest.raises(IndexError, match="outside"):
        reader[np.array([600])]


def test_broken_refine_files_are_refused_with_the_file_named(tmp_path: Path, vectors: np.ndarray) -> None:
    with pytest.raises(FileNotFoundError, match="missing.npy"):
        RefineVectors(tmp_path / "missing.npy")
    path = _saved(tmp_path, vectors.astype(np.float16))
    data = path.read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[: len(data) - 100])  # a copy that stopped early
    with pytest.raises(ValueError, match="cut.npy.*shorter"):
        RefineVectors(tmp_path / "cut.npy")
    with pytest.raises(ValueError, match="3d.npy.*2-D"):
        RefineVectors(_saved(tmp_path, np.zeros((2, 3, 4), np.float32), "3d.npy"))
    with pytest.raises(ValueError, match="ints.npy.*float16/float32"):
        RefineVectors(_saved(tmp_path, np.zeros((2, 3), np.int64), "ints.npy"))
    (tmp_path / "text.npy").write_text("not an array")
    with pytest.raises(ValueError, match="text.npy: not a .npy"):
        RefineVectors(tmp_path / "text.npy")


def _pq_index(vectors: np.ndarray) -> faiss.Index:
    index = faiss.index_factory(DIM, "IVF4,PQ2x4", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    set_search_params(index, {"nprobe": 2})
    return index


def test_candidates_are_re_ranked_by_their_exact_inner_product(tmp_path: Path, vectors: np.ndarray) -> None:
    base = _pq_index(vectors)
    refined = DiskRefinedIndex(base, RefineVectors(_saved(tmp_path, vectors)), k_factor=3)
    queries = vectors[:20] + 0.05
    k = 5
    scores, rows = refined.search(queries, k)
    _, candidates = base.search(queries, 3 * k)
    for q, cand, got_rows, got_scores in zip(queries, candidates, rows, scores, strict=True):
        cand = cand[cand >= 0]
        exact = vectors[cand] @ q
        order = np.argsort(-exact, kind="stable")[:k]
        np.testing.assert_array_equal(got_rows, cand[order])
        np.testing.assert_allclose(got_scores, exact[order], rtol=1e-5)
    # the coarse codes alone order the same candidates worse than the exact re-ranking does
    truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :k]
    plain = base.search(queries, k)[1]
    overlap = lambda found: np.mean([len(set(f) & set(t)) for f, t in zip(found, truth, strict=True)])  # noqa: E731
    assert overlap(rows) > overlap(plain)


def test_with_every_row_a_candidate_it_is_exact_search(tmp_path: Path, vectors: np.ndarray) -> None:
    flat = faiss.IndexFlatIP(DIM)
    flat.add(vectors)
    refined = DiskRefinedIndex(_pq_index(vectors), vectors.astype(np.float32), k_factor=len(vectors))
    set_search_params(refined, {"nprobe": 4})  # every cell: every row is a candidate
    queries = normalise(np.random.default_rng(2).standard_normal((7, DIM)))
    exact_scores, exact_rows = flat.search(queries, 10)
    scores, rows = refined.search(queries, 10)
    np.testing.assert_array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5)


def test_past_the_last_row_hits_are_padded_like_faiss(vectors: np.ndarray) -> None:
    few = vectors[:6]
    flat = faiss.IndexFlatIP(DIM)
    flat.add(few)
    refined = DiskRefinedIndex(flat, few, k_factor=4)
    scores, rows = refined.search(vectors[:2], 9)
    assert (rows[:, :6] >= 0).all() and (rows[:, 6:] == -1).all()
    assert sorted(rows[0, :6].tolist()) == list(range(6)) and np.isfinite(scores[:, :6]).all()


def test_search_parameters_reach_the_refine_and_the_index_under_it(vectors: np.ndarray) -> None:
    refined = DiskRefinedIndex(_pq_index(vectors), vectors, k_factor=2)
    set_search_params(refined, {"k_factor": 6, "nprobe": 3})
    assert refined.k_factor == 6 and faiss.downcast_index(refined.base).nprobe == 3
    with pytest.raises(ValueError, match="shape"):
        DiskRefinedIndex(refined.base, vectors[:10])


def test_a_reader_travels_by_pickle_as_its_path(tmp_path: Path, vectors: np.ndarray) -> None:
    import pickle

    reader = RefineVectors(_saved(tmp_path, vectors))
    blob = pickle.dumps(reader)
    assert len(blob) < 1000  # the path, not the 600 x 16 rows
    copy = pickle.loads(blob)
    assert copy.path == reader.path and copy.shape == reader.shape
    np.testing.assert_array_equal(copy[np.arange(0, 600, 7)], vectors[::7])
