"""Indexes over encoded shards: exact below the threshold, compressed above it with measured recall and
memory in the manifest, sharded index files that search like one index."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np
import pytest

from ragym.data_prep.encoding.clustered import ClusteredSpec, ClusteredVectors
from ragym.data_prep.encoding.index import (
    IndexOptions,
    build_sharded_index,
    load_sharded_index,
    search_shards,
)
from ragym.envs.retrieval.retrievers import DiskRefinedIndex
from tests.data_prep.encoding_fakes import encode_table

NUM, DIM, K = 4000, 32, 15
TWO_COMPRESSED_SHARDS = dict(exact_below=1000, nlist=16, train_size=NUM, max_shard_vectors=2000)
"""Options that make the 4,000 test vectors a compressed index in two shards."""


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


def test_small_sets_get_an_exact_index_in_shards_that_search_like_one(
    encoded: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
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


def test_large_sets_get_a_compressed_index_whose_recall_and_memory_are_recorded(
    encoded: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    options = IndexOptions(
        exact_below=1000,
        nlist=16,
        code="PQ8x4",
        refine="SQ8",
        nprobe=4,
        k_factor=4,
        train_size=NUM,
        num_eval_queries=300,
        max_shard_vectors=2000,
    )
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
    from ragym.data_prep.encoding import cli

    argv = ["index", "--encoded", str(encoded), "--out", str(tmp_path / "idx"), "--exact-below", "5000"]
    assert cli.main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["kind"] == "exact" and printed["num_vectors"] == NUM
    assert printed == json.loads((tmp_path / "idx" / "index.json").read_text())


def test_compressed_indexes_skip_polysemous_training() -> None:
    """Polysemous (simulated-annealing) PQ training is for Hamming filtering, which ragym never uses; left on,
    it dominated the training of a 256-sub-quantizer refine code."""
    import faiss

    from ragym.data_prep.encoding.index import no_polysemous_training

    index = faiss.index_factory(48, "IVF4,PQ8x8,Refine(PQ16x8)", faiss.METRIC_INNER_PRODUCT)
    base = faiss.downcast_index(index.base_index)
    refine = faiss.downcast_index(index.refine_index)
    assert base.do_polysemous_training and refine.do_polysemous_training  # faiss's defaults
    no_polysemous_training(index)
    assert not base.do_polysemous_training and not refine.do_polysemous_training


def test_the_default_compressed_index_is_rabitq_re_ranked_from_disk(
    encoded: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    options = IndexOptions(**TWO_COMPRESSED_SHARDS, num_eval_queries=200)
    manifest = build_sharded_index(encoded, tmp_path / "idx", options)
    assert manifest["factory"] == "IVF16,RaBitQ2" and manifest["refine"] == "disk"
    assert manifest["trained_on"] == NUM
    # nprobe tuned: the smallest of 8, 16 (every cell) whose recall@15 reaches 0.95 on the evaluation queries
    tried = manifest["recall_eval"]["nprobe_tried"]
    chosen = manifest["recall_eval"]["nprobe"]
    assert list(tried) <= ["8", "16"] and tried[str(chosen)] == manifest["recall@15"] >= 0.95
    assert all(recall < 0.95 for nprobe, recall in tried.items() if int(nprobe) < chosen)
    assert manifest["search"] == {"nprobe": chosen, "k_factor": 4, "query_bits": 8}
    # memory counts the faiss files only; the float16 vectors the refine reads are on disk, counted apart
    folder = tmp_path / "idx"
    assert manifest["memory_bytes"] == sum((folder / s["index"]).stat().st_size for s in manifest["shards"])
    refine_files = [folder / s["refine"] for s in manifest["shards"]]
    assert [f.name for f in refine_files] == ["shard-000.refine.npy", "shard-001.refine.npy"]
    assert manifest["refine_disk_bytes"] == sum(f.stat().st_size for f in refine_files)
    assert manifest["refine_disk_ratio"] == pytest.approx(0.5, abs=0.01)  # float16 against float32
    stored = np.concatenate([np.load(f) for f in refine_files])
    assert stored.dtype == np.float16
    np.testing.assert_allclose(stored, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), atol=1e-3)
    assert not list(folder.glob(".*tmp*"))  # no temporary file left behind
    _, indexes, _ = load_sharded_index(folder)
    refined = indexes[0][1]
    assert isinstance(refined, DiskRefinedIndex) and refined.k_factor == 4
    base = faiss.downcast_index(refined.base)
    assert isinstance(base, faiss.IndexIVFRaBitQ) and base.qb == 8 and base.nprobe == chosen
    # the same codes without the refine keep less of the exact top 15
    plain = build_sharded_index(encoded, tmp_path / "plain", replace(options, refine="none"))
    assert manifest["recall@15"] > plain["recall@15"] and manifest["recall@15"] >= 0.95
    assert plain["refine_disk_bytes"] == 0 and not list((tmp_path / "plain").glob("*.refine.npy"))


def test_the_service_loads_a_disk_refined_index_and_answers_like_the_build(
    encoded: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    from ragym.envs.retrieval.service.shards import ShardedRetriever

    options = IndexOptions(**TWO_COMPRESSED_SHARDS, num_eval_queries=50)
    build_sharded_index(encoded, tmp_path / "idx", options)
    served = ShardedRetriever.from_manifest(tmp_path / "idx" / "index.json")
    assert all(isinstance(s.index, DiskRefinedIndex) and s.index.k_factor == 4 for s in served.shards)
    _, indexes, ids = load_sharded_index(tmp_path / "idx")
    queries = vectors[::211]
    expected = search_shards(indexes, queries, K)
    hits = served.batch_search(list(queries), K)
    assert [[h.docid for h in row] for row in hits] == [[ids[r] for r in row] for row in expected]
    (tmp_path / "idx" / "shard-001.refine.npy").unlink()
    with pytest.raises(FileNotFoundError, match="shard-001.refine.npy"):
        ShardedRetriever.from_manifest(tmp_path / "idx" / "index.json")
    with pytest.raises(FileNotFoundError, match="shard-001.refine.npy"):
        load_sharded_index(tmp_path / "idx")


def test_cli_passes_the_compressed_code_through(encoded: Path, tmp_path: Path) -> None:
    from ragym.data_prep.encoding import cli

    argv = [
        "index",
        "--encoded",
        str(encoded),
        "--out",
        str(tmp_path / "idx"),
        "--exact-below",
        "1000",
        "--code",
        "PQ8x4",
        "--refine",
        "SQ8",
        "--nprobe",
        "4",
        "--k-factor",
        "3",
    ]
    assert cli.main(argv) == 0
    manifest = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert manifest["factory"].endswith(",PQ8x4,Refine(SQ8)") and manifest["search"]["nprobe"] == 4
    assert manifest["refine"] == "SQ8" and manifest["search"]["k_factor"] == 3
    argv = [
        "index",
        "--encoded",
        str(encoded),
        "--out",
        str(tmp_path / "ram"),
        "--exact-below",
        "1000",
        "--code",
        "RaBitQ3",
        "--refine",
        "none",
    ]
    assert cli.main(argv) == 0
    manifest = json.loads((tmp_path / "ram" / "index.json").read_text())
    assert manifest["factory"].endswith(",RaBitQ3") and manifest["refine"] == "none"
    assert not list((tmp_path / "ram").glob("*.refine.npy"))


def test_bad_index_options_are_refused_before_any_training(encoded: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="k_factor"):
        IndexOptions(k_factor=0)
    with pytest.raises(ValueError, match="query_bits"):
        IndexOptions(query_bits=12)
    with pytest.raises(ValueError, match="spelt 'disk'"):
        IndexOptions(refine="Disk")
    with pytest.raises(ValueError, match="faiss cannot build 'IVF16,RaBitQ2,Refine\\(SQ9\\)'.*refine 'SQ9'"):
        build_sharded_index(encoded, tmp_path / "idx", IndexOptions(exact_below=1000, nlist=16, refine="SQ9"))
    assert not (tmp_path / "idx").exists()


def test_the_cli_reports_bad_input_in_one_line(
    encoded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragym.data_prep.encoding import cli

    argv = ["index", "--encoded", str(encoded), "--out", str(tmp_path / "idx"), "--k-factor", "0"]
    assert cli.main(argv) == 2
    assert (
        capsys.readouterr().err
        == "python -m ragym.data_prep.encoding index: index options must be >= 1 (nlist, train_size, nprobe: >= 0): {'k_factor': 0}\n"
    )
    assert cli.main(["index", "--encoded", str(tmp_path / "nothing"), "--out", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing has no manifest.json" in err


def test_ivf_cells_grow_with_the_corpus_and_training_follows_them() -> None:
    options = IndexOptions()
    # 4 sqrt(n) as a power of two: a query at nprobe 32 scans ~8 sqrt(n) codes, not n / 1,680 x 32 at 12M
    assert (
        options.factory(1_000_000) == "IVF4096,RaBitQ2" and options.factory(12_000_000) == "IVF16384,RaBitQ2"
    )
    assert options.training_vectors(12_000_000) == 39 * 16384  # faiss's 39 points per centroid
    assert options.training_vectors(300_000) == 39 * 2048 and options.factory(300_000) == "IVF2048,RaBitQ2"
    assert IndexOptions(nlist=256).training_vectors(300_000) == 65_536  # never fewer than 65,536
    # a training size given caps the cells so that each still has 39 points
    capped = IndexOptions(train_size=65_536)
    assert capped.factory(12_000_000) == "IVF1680,RaBitQ2" and capped.training_vectors(12_000_000) == 65_536
    assert IndexOptions(nlist=64).factory(1_000_000) == "IVF64,RaBitQ2"
    with pytest.raises(ValueError, match="train_size"):
        IndexOptions(train_size=-1)


def test_an_array_a_prep_holds_indexes_exactly_like_the_same_vectors_in_shards(
    encoded: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    from ragym.data_prep.encoding.index import VectorBlocks, index_vectors

    options = IndexOptions(**TWO_COMPRESSED_SHARDS, num_eval_queries=100)
    from_shards = build_sharded_index(encoded, tmp_path / "a", options)
    ids = [f"v{i}" for i in range(NUM)]
    from_array = index_vectors(VectorBlocks.from_array(ids, vectors, block=1000), tmp_path / "b", options)
    for manifest in (from_array, from_shards):
        del manifest["recall_eval"]["seconds"]
    assert from_array == from_shards
    for name in ("shard-000.faiss", "shard-001.refine.npy", "shard-001.ids"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with pytest.raises(ValueError, match="3 ids for vectors of shape"):
        VectorBlocks.from_array(ids[:3], vectors)


def test_nprobe_is_tuned_to_the_target_recall_unless_given(encoded: Path, tmp_path: Path) -> None:
    base = dict(exact_below=1000, nlist=64, train_size=NUM, num_eval_queries=200)
    tuned = build_sharded_index(encoded, tmp_path / "tuned", IndexOptions(**base, target_recall=0.99))
    tried = {int(p): r for p, r in tuned["recall_eval"]["nprobe_tried"].items()}
    assert list(tried) == sorted(tried) and list(tried)[0] == 8  # smallest first, from 8
    chosen = tuned["search"]["nprobe"]
    assert tried[chosen] == tuned["recall@15"] and (tuned["recall@15"] >= 0.99 or chosen == 64)
    assert all(r < 0.99 for p, r in tried.items() if p < chosen)
    assert tried[min(tried)] < tried[chosen]  # probing more cells found more of the exact neighbours
    fixed = build_sharded_index(encoded, tmp_path / "fixed", IndexOptions(**base, nprobe=3))
    assert fixed["search"]["nprobe"] == 3 and fixed["recall_eval"]["nprobe_tried"] == {
        "3": fixed["recall@15"]
    }
    _, indexes, _ = load_sharded_index(tmp_path / "tuned")
    assert faiss.downcast_index(indexes[0][1].base).nprobe == chosen


def test_tuning_stops_where_more_probes_stop_helping(encoded: Path, tmp_path: Path) -> None:
    """A coarse code caps the recall below the target: probing every cell would cost time and add nothing."""
    options = IndexOptions(
        exact_below=1000,
        nlist=64,
        code="PQ2x4",
        refine="none",
        train_size=NUM,
        num_eval_queries=200,
        target_recall=0.99,
    )
    manifest = build_sharded_index(encoded, tmp_path / "idx", options)
    tried = {int(p): r for p, r in manifest["recall_eval"]["nprobe_tried"].items()}
    chosen = manifest["search"]["nprobe"]
    assert manifest["recall@15"] == tried[chosen] < 0.99  # the target is out of reach for 2 bytes a vector
    last = max(tried)
    assert chosen < last <= 64 and tried[last] - tried[chosen] < 0.002  # stopped at the plateau
