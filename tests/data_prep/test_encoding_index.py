"""Indexes over encoded shards: exact below the threshold, compressed above it with measured recall and
memory in the manifest, sharded index files that search like one index."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest

from data_prep.encoding.clustered import ClusteredSpec, ClusteredVectors
from data_prep.encoding.index import IndexOptions, build_sharded_index, load_sharded_index, search_shards
from tests.data_prep.encoding_fakes import encode_table

NUM, DIM, K = 4000, 32, 15


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    gen = ClusteredVectors(ClusteredSpec(dim=DIM, rank=16, num_clusters=40, seed=3))
    return np.concatenate(list(gen.blocks(NUM, block_size=2000)))


@pytest.fixture(scope="module")
def encoded(vectors: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return encode_table(vectors, tmp_path_factory.mktemp("enc") / "enc")


def _exact_neighbours(vectors: np.ndarray, rows: np.ndarray, k: int) -> list[list[int]]:
    """Hand-rolled exact top-k by inner product, the query itself left out."""
    scores = vectors[rows] @ vectors.T  # (Q, NUM)
    scores[np.arange(len(rows)), rows] = -np.inf
    return [list(np.argsort(-s, kind="stable")[:k]) for s in scores]


def test_small_sets_get_an_exact_index_in_shards_that_search_like_one(encoded: Path, vectors: np.ndarray,
                                                                        tmp_path: Path) -> None:  # fmt: skip
    manifest = build_sharded_index(
        encoded, tmp_path / "idx", IndexOptions(exact_below=10_000, max_shard_vectors=2500)
    )
    assert manifest["kind"] == "exact" and manifest["factory"] == "Flat"
    # Four 1000-vector encoded shards, two per index shard of at most 2500.
    assert [s["count"] for s in manifest["shards"]] == [2000, 2000]
    assert manifest["memory_ratio"] == pytest.approx(1.0, abs=0.01)
    _, indexes, ids = load_sharded_index(tmp_path / "idx")
    assert ids == [f"v{i}" for i in range(NUM)]
    rows = np.arange(0, NUM, 97)
    found = search_shards(indexes, vectors[rows], K + 1)
    expected = _exact_neighbours(vectors, rows, K)
    assert [[r for r in f if r != q][:K] for q, f in zip(rows, found, strict=True)] == expected


def test_large_sets_get_a_compressed_index_whose_recall_and_memory_are_recorded(encoded: Path, vectors: np.ndarray,
                                                                                tmp_path: Path) -> None:  # fmt: skip
    options = IndexOptions(exact_below=1000, nlist=16, code="PQ8x4", refine="SQ8", nprobe=4, k_factor=4,
                           train_size=NUM, num_eval_queries=300, max_shard_vectors=2000)  # fmt: skip
    manifest = build_sharded_index(encoded, tmp_path / "idx", options)
    assert manifest["kind"] == "compressed" and manifest["factory"] == "IVF16,PQ8x4,Refine(SQ8)"
    assert len(manifest["shards"]) == 2
    assert json.loads((tmp_path / "idx" / "index.json").read_text()) == manifest
    files = sum((tmp_path / "idx" / s["index"]).stat().st_size for s in manifest["shards"])
    assert manifest["memory_bytes"] == files and manifest["exact_memory_bytes"] == NUM * DIM * 4
    assert manifest["memory_ratio"] < 0.5  # 4 B PQ + 32 B SQ8 + 8 B id per vector, against 128 B float32
    # Recompute the recorded recall@15 independently: same queries, hand-rolled exact neighbours.
    _, indexes, _ = load_sharded_index(tmp_path / "idx")
    rows = np.sort(np.random.default_rng(options.seed + 1).choice(NUM, size=300, replace=False))
    truth = _exact_neighbours(vectors, rows, K)
    found = search_shards(indexes, vectors[rows], K + 1)
    recall = np.mean(
        [len(set(t) & {r for r in f if r != q}) / K for q, t, f in zip(rows, truth, found, strict=True)]
    )
    assert manifest["recall@15"] == pytest.approx(recall, abs=1 / (K * 300) + 1e-9)
    assert 0.5 < manifest["recall@15"] < 1.0  # compressed: good but not exact


def test_the_refine_step_raises_recall(encoded: Path, tmp_path: Path) -> None:
    base = dict(exact_below=1000, nlist=16, code="PQ4x4", nprobe=4, train_size=NUM, num_eval_queries=200)
    plain = build_sharded_index(encoded, tmp_path / "plain", IndexOptions(**base, refine="none"))
    refined = build_sharded_index(encoded, tmp_path / "refined", IndexOptions(**base, refine="SQfp16"))
    assert refined["recall@15"] > plain["recall@15"] + 0.1
    assert refined["memory_bytes"] > plain["memory_bytes"]
    assert isinstance(faiss.read_index(str(tmp_path / "refined" / "shard-000.faiss")), faiss.IndexRefine)


def test_cli_indexes_an_encoded_folder(
    encoded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from data_prep.encoding import cli

    argv = ["index", "--encoded", str(encoded), "--out", str(tmp_path / "idx"), "--exact-below", "5000"]
    assert cli.main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["kind"] == "exact" and printed["num_vectors"] == NUM
    assert printed == json.loads((tmp_path / "idx" / "index.json").read_text())


def test_compressed_indexes_skip_polysemous_training() -> None:
    """Polysemous (simulated-annealing) PQ training is for Hamming filtering, which ragym never uses; left on,
    it dominated the training of a 256-sub-quantizer refine code."""
    import faiss

    from data_prep.encoding.index import no_polysemous_training

    index = faiss.index_factory(48, "IVF4,PQ8x8,Refine(PQ16x8)", faiss.METRIC_INNER_PRODUCT)
    base = faiss.downcast_index(index.base_index)
    refine = faiss.downcast_index(index.refine_index)
    assert base.do_polysemous_training and refine.do_polysemous_training  # faiss's defaults
    no_polysemous_training(index)
    assert not base.do_polysemous_training and not refine.do_polysemous_training


def test_the_default_compressed_code_is_rabitq_with_its_query_bits_recorded(
    encoded: Path, tmp_path: Path
) -> None:
    options = IndexOptions(exact_below=1000, nlist=16, train_size=NUM, num_eval_queries=100)
    manifest = build_sharded_index(encoded, tmp_path / "idx", options)
    assert manifest["factory"] == "IVF16,RaBitQ3"
    assert manifest["search"] == {"nprobe": 32, "k_factor": 8, "query_bits": 8}
    # 3 bits x 32 dims = 12 bytes + RaBitQ's factors + an 8-byte id per vector, against 128 bytes of float32
    assert manifest["memory_ratio"] < 0.5
    _, indexes, _ = load_sharded_index(tmp_path / "idx")
    index = faiss.downcast_index(indexes[0][1])
    assert isinstance(index, faiss.IndexIVFRaBitQ) and index.qb == 8 and index.nprobe == 32


def test_cli_passes_the_compressed_code_through(encoded: Path, tmp_path: Path) -> None:
    from data_prep.encoding import cli

    argv = ["index", "--encoded", str(encoded), "--out", str(tmp_path / "idx"), "--exact-below", "1000",
            "--code", "PQ8x4", "--refine", "SQ8", "--nprobe", "4"]  # fmt: skip
    assert cli.main(argv) == 0
    manifest = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert manifest["factory"].endswith(",PQ8x4,Refine(SQ8)") and manifest["search"]["nprobe"] == 4
