"""A version's document rows: serving it re-writes only those rows of a flat index, searches use both parts of one
version, a later version writes the KB's own vectors back, and an index that cannot replace rows refuses it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ragym.envs.retrieval.index_rows import RowsNotReplaceable
from ragym.envs.retrieval.retrievers import FaissRetriever, IndexSpec
from ragym.envs.retrieval.service.shards import ShardedRetriever, split_into_shards
from ragym.envs.retrieval.torch_flat import TorchFlatIndex
from ragym.envs.retrieval.versions import (
    VERSION_KEY,
    DocumentRows,
    EncoderSlot,
    QueryEncoder,
    VersionedRetriever,
    load_query_encoder,
    save_query_encoder,
)

DIM = 16


def _unit(rng: np.random.Generator, num: int, dim: int = DIM) -> np.ndarray:
    vectors = rng.standard_normal((num, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _version(name: str, docids: list[str], seed: int, dim: int = DIM) -> QueryEncoder:
    """A version with a random map and random unit rows for ``docids``."""
    rng = np.random.default_rng(seed)
    matrix = np.eye(dim, dtype=np.float32) + 0.3 * rng.standard_normal((dim, dim)).astype(np.float32)
    return QueryEncoder(name, matrix, {}, DocumentRows(tuple(docids), _unit(rng, len(docids), dim)))


def _base(kind: str, vectors: np.ndarray, docids: list[str], tmp: Path) -> FaissRetriever | ShardedRetriever:
    if kind == "flat":
        return FaissRetriever.from_vectors(vectors, docids)
    if kind == "torch":  # the GPU form of a flat index, here on the CPU
        return FaissRetriever(TorchFlatIndex(vectors, "cpu"), docids)
    return ShardedRetriever.from_manifest(split_into_shards(vectors, docids, 3, tmp / "shards"))


def _held(base: FaissRetriever | ShardedRetriever) -> dict[str, np.ndarray]:
    """Docid -> the vector the index holds now (read from its storage, not through a search)."""
    held = {}
    for shard in base.shards if isinstance(base, ShardedRetriever) else [base]:
        index = shard.index
        rows = (
            index.vectors.numpy()
            if isinstance(index, TorchFlatIndex)
            else index.reconstruct_n(0, index.ntotal)
        )
        held.update(zip(shard.docids, rows.copy(), strict=True))
    return held


def _expected(
    version: QueryEncoder | None, original: dict[str, np.ndarray], query: np.ndarray
) -> dict[str, float]:
    """Docid -> the score ``version`` gives it for ``query``, by hand: its map, its rows over the originals."""
    rows = dict(original)
    if version is not None and version.documents is not None:
        rows.update(zip(version.documents.ids, version.documents.vectors, strict=True))
    q = query if version is None else version.encode(query[None])[0]
    return {d: float(q @ v) for d, v in rows.items()}


@pytest.mark.parametrize("kind", ["flat", "torch", "shards"])
def test_serving_a_version_rewrites_only_its_rows_and_the_next_one_writes_the_kbs_back(
    tmp_path: Path, kind: str
) -> None:
    rng = np.random.default_rng(0)
    docids = [f"d{i}" for i in range(300)]
    vectors = _unit(rng, 300)
    versioned = VersionedRetriever(_base(kind, vectors, docids, tmp_path), EncoderSlot())
    original = _held(versioned.base)
    first = _version("v1", docids[10:40], seed=1)
    second = _version("v2", docids[30:50], seed=2)  # d30..d39 in both, d10..d29 only in v1
    for version in (first, second, None):
        versioned.swap(version)
        held = _held(versioned.base)
        changed = (
            {}
            if version is None or version.documents is None
            else dict(zip(version.documents.ids, version.documents.vectors, strict=True))
        )
        for docid in docids:  # every other row bit-identical to the index as built
            assert np.array_equal(held[docid], changed.get(docid, original[docid])), (version, docid)
        query = _unit(rng, 1)[0]
        expected = _expected(version, original, query)
        hits = versioned.search(query, 5)
        top = sorted(expected, key=lambda d: -expected[d])[:5]
        assert [h.docid for h in hits] == top
        assert [h.score for h in hits] == pytest.approx([expected[d] for d in top], abs=1e-5)
        assert {h.payload.get(VERSION_KEY) for h in hits} == {None if version is None else version.version}


def test_a_version_folder_holds_its_rows(tmp_path: Path) -> None:
    version = _version("v1", ["a", "c"], seed=0)
    back = load_query_encoder(save_query_encoder(version, tmp_path / "v1"))
    assert back.documents is not None and back.documents.ids == ("a", "c")
    assert np.array_equal(back.documents.vectors, version.documents.vectors)  # pyright: ignore[reportOptionalMemberAccess]
    plain = load_query_encoder(save_query_encoder(QueryEncoder("q", version.matrix), tmp_path / "q"))
    assert plain.documents is None and not (tmp_path / "q" / "documents.npz").exists()


def test_a_version_with_non_finite_values_is_refused_when_read(tmp_path: Path) -> None:
    """A diverged round's NaN W (or rows) loaded and was swapped in; every query it encoded was then refused."""
    good = tmp_path / "v1"
    save_query_encoder(QueryEncoder("v1", np.eye(DIM, dtype=np.float32)), good)
    np.savez(good / "encoder.npz", matrix=np.full((DIM, DIM), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match=r"^query encoder v1: W holds non-finite values"):
        load_query_encoder(good)
    vectors = _unit(np.random.default_rng(0), 1)
    vectors[0, 3] = np.inf
    with pytest.raises(ValueError, match="document rows hold non-finite vectors"):
        DocumentRows(("a",), vectors)


def test_an_index_that_cannot_replace_rows_refuses_a_version_with_rows_and_serves_on() -> None:
    rng = np.random.default_rng(0)
    docids = [f"d{i}" for i in range(200)]
    hnsw = FaissRetriever.from_vectors(_unit(rng, 200), docids, spec=IndexSpec(kind="hnsw"))
    versioned = VersionedRetriever(hnsw, EncoderSlot())
    assert versioned.row_refusal is not None and "IndexHNSWFlat cannot replace rows" in versioned.row_refusal
    with pytest.raises(RowsNotReplaceable, match="IndexHNSWFlat cannot replace rows in place"):
        versioned.swap(_version("v1", docids[:5], seed=1))
    assert versioned.version is None
    versioned.swap(QueryEncoder("q", np.eye(DIM, dtype=np.float32)))  # a query map alone needs no row written
    assert versioned.search(_unit(rng, 1)[0], 3)[0].payload[VERSION_KEY] == "q"
    flat = VersionedRetriever(FaissRetriever.from_vectors(_unit(rng, 200), docids), EncoderSlot())
    with pytest.raises(ValueError, match="1 document rows name no entity of the index"):
        flat.swap(_version("v2", ["d1", "elsewhere"], seed=2))
    assert flat.version is None and flat.row_refusal is None


def test_searches_during_swaps_each_use_one_whole_version() -> None:
    """Threads search while versions with different rows swap in: each hit's score is its own version's (a search
    that met one version's map and another's rows would score by neither)."""
    rng = np.random.default_rng(0)
    docids = [f"d{i}" for i in range(400)]
    versioned = VersionedRetriever(FaissRetriever.from_vectors(_unit(rng, 400), docids), EncoderSlot())
    original = _held(versioned.base)
    versions = {v.version: v for v in (_version(f"v{i}", docids[: 200 + 50 * i], seed=i) for i in range(4))}
    wrong, searched, stop = [], [0], threading.Event()

    def search(seed: int) -> None:
        local = np.random.default_rng(seed)
        while not stop.is_set():
            query = _unit(local, 1)[0]
            hits = versioned.search(query, 3)
            expected = _expected(versions.get(hits[0].payload.get(VERSION_KEY, "")), original, query)
            wrong.extend(h for h in hits if abs(h.score - expected[h.docid]) > 1e-5)
            searched[0] += 1

    threads = [threading.Thread(target=search, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for n in range(60):
        versioned.swap(versions[f"v{n % 4}"])
        time.sleep(0.002)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert wrong == [] and searched[0] > 60


def test_tens_of_thousands_of_entities_rewrite_only_the_changed_rows() -> None:
    """Real size: 50,000 entities, a version changing 5,000 of them."""
    rng = np.random.default_rng(0)
    docids = [f"e{i}" for i in range(50_000)]
    vectors = _unit(rng, 50_000, 32)
    versioned = VersionedRetriever(FaissRetriever.from_vectors(vectors, docids), EncoderSlot())
    before = versioned.base.index.reconstruct_n(0, 50_000)
    picked = sorted(rng.choice(50_000, 5_000, replace=False).tolist())
    version = _version("big", [docids[i] for i in picked], seed=3, dim=32)
    versioned.swap(version)
    after = versioned.base.index.reconstruct_n(0, 50_000)
    untouched = np.setdiff1d(np.arange(50_000), picked)
    assert np.array_equal(after[untouched], before[untouched])
    assert np.array_equal(after[picked], version.documents.vectors)  # pyright: ignore[reportOptionalMemberAccess]
    queries = _unit(rng, 20, 32)
    expected = np.argsort(-(version.encode(queries) @ after.T), axis=1, kind="stable")[:, :5]
    found = [[int(h.docid[1:]) for h in hits] for hits in versioned.batch_search(list(queries), 5)]
    assert found == expected.tolist()
    versioned.swap(None)
    assert np.array_equal(versioned.base.index.reconstruct_n(0, 50_000), before)
