"""A KB searches the index the encoding step built (index/entities/index.json) when kb.json records one:
compressed and sharded indexes load with their recorded search parameters and map rows back to entities."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest

from ragym.data_prep.encoding import shards
from ragym.data_prep.encoding.index import IndexOptions, build_sharded_index
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.retrieval.retrievers import DiskRefinedIndex, FaissRetriever, IndexSpec
from ragym.envs.retrieval.service.shards import ShardedRetriever

K = 5


def _rebuilt(tiny_kb: Path, tmp_path: Path, options: IndexOptions) -> Path:
    """A copy of the tiny KB whose encoded entities are cut into 20-row shards and whose entity index is
    rebuilt from them with ``options``."""
    kb = tmp_path / "kb"
    shutil.copytree(tiny_kb, kb)
    encoded = kb / "index" / "encoded" / "entities"
    ids, vectors = shards.load_encoded(encoded)
    config = json.loads((encoded / "encoding.json").read_text())
    shutil.rmtree(encoded)
    shards.check_config(encoded, config)
    for number, start in enumerate(range(0, len(ids), 20)):
        shards.write_shard(encoded, number, ids[start : start + 20], vectors[start : start + 20])
    shards.write_manifest(encoded, [20] * (len(ids) // 20), vectors.shape[1])
    shutil.rmtree(kb / "index" / "entities")
    build_sharded_index(encoded, kb / "index" / "entities", options)
    return kb


def _exact(kb_root: Path, queries: np.ndarray) -> list[list[str]]:
    kb = load_kb(kb_root)
    scores = queries @ kb.entity_embeddings.T  # (Q, entities)
    return [[kb.entities["entity_id"][r] for r in np.argsort(-s, kind="stable")[:K]] for s in scores]


def test_the_recorded_exact_index_answers_like_a_flat_one(tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    assert kb.manifest["index"]["entities"]["kind"] == "exact"
    built, flat = kb.image_retriever(), kb.image_retriever(IndexSpec(kind="flat"))
    assert built is not flat and isinstance(built, FaissRetriever)
    assert built.docids == kb.entities["entity_id"].tolist()  # read from index/entities/shard-000.ids
    queries = list(kb.query_embeddings[:10])
    assert [[(h.docid, h.payload) for h in hits] for hits in built.batch_search(queries, K)] == [
        [(h.docid, h.payload) for h in hits] for hits in flat.batch_search(queries, K)
    ]


def test_a_compressed_sharded_index_loads_with_its_search_parameters(tiny_kb: Path, tmp_path: Path) -> None:
    options = IndexOptions(
        exact_below=10,
        nlist=2,
        code="PQ4x4",
        refine="SQ8",
        nprobe=2,
        k_factor=6,
        train_size=60,
        num_eval_queries=30,
        max_shard_vectors=25,
    )
    root = _rebuilt(tiny_kb, tmp_path, options)
    manifest = json.loads((root / "index" / "entities" / "index.json").read_text())
    assert (
        manifest["kind"] == "compressed" and len(manifest["shards"]) == 3
    )  # 60 entities in 20s, <= 25 per shard
    kb = load_kb(root)
    retriever = kb.image_retriever()
    assert isinstance(retriever, ShardedRetriever) and len(retriever.shards) == 3
    for shard in retriever.shards:
        index = faiss.downcast_index(shard.index)
        assert isinstance(index, faiss.IndexRefine) and index.k_factor == 6  # read_index alone gives 1
        assert faiss.downcast_index(index.base_index).nprobe == 2
    hits = retriever.batch_search(list(kb.query_embeddings), K)
    for row_hits in hits:  # each hit's payload is its own entity's, wherever its shard put it
        for hit in row_hits:
            assert hit.payload == kb.entity_payload(kb.entity_row[hit.docid])
    # nprobe 2 of 2 cells and an SQ8 refine: the top 5 are (nearly) the exact top 5
    truth = _exact(root, kb.query_embeddings)
    recall = np.mean([len({h.docid for h in a} & set(t)) / K for a, t in zip(hits, truth, strict=True)])
    assert recall >= 0.9


def test_built_requires_a_recorded_index_and_auto_falls_back_to_flat(tiny_kb: Path, tmp_path: Path) -> None:
    root = tmp_path / "kb"
    shutil.copytree(tiny_kb, root)
    manifest = json.loads((root / "kb.json").read_text())
    del manifest["index"]
    (root / "kb.json").write_text(json.dumps(manifest))
    kb = load_kb(root)
    with pytest.raises(ValueError, match="records no entity index"):
        kb.image_retriever(IndexSpec(kind="built"))
    auto = kb.image_retriever()
    assert isinstance(auto, FaissRetriever) and isinstance(auto.index, faiss.IndexFlatIP)


def test_an_index_that_misses_entities_is_refused(tiny_kb: Path, tmp_path: Path) -> None:
    root = _rebuilt(tiny_kb, tmp_path, IndexOptions(max_shard_vectors=25))
    ids = root / "index" / "entities" / "shard-001.ids"
    ids.write_text("".join(f"X{i}\n" for i in range(len(ids.read_text().splitlines()))))
    with pytest.raises(ValueError, match="ids are no entity"):
        load_kb(root).image_retriever()


def test_a_disk_refined_index_re_ranks_each_shard_from_its_vectors_file(
    tiny_kb: Path, tmp_path: Path
) -> None:
    options = IndexOptions(
        exact_below=10,
        nlist=2,
        code="RaBitQ1",
        refine="disk",
        nprobe=2,
        k_factor=12,
        train_size=60,
        num_eval_queries=30,
        max_shard_vectors=25,
    )
    root = _rebuilt(tiny_kb, tmp_path, options)
    kb = load_kb(root)
    retriever = kb.image_retriever()
    assert isinstance(retriever, ShardedRetriever) and len(retriever.shards) == 3
    for number, shard in enumerate(retriever.shards):
        assert isinstance(shard.index, DiskRefinedIndex) and shard.index.k_factor == 12
        assert shard.index.vectors.path.name == f"shard-{number:03d}.refine.npy"
    # every cell probed and 12 x 5 candidates out of at most 25 rows a shard: the exact top 5, in order
    hits = retriever.batch_search(list(kb.query_embeddings), K)
    assert [[h.docid for h in row] for row in hits] == _exact(root, kb.query_embeddings)
    for row_hits in hits:
        for hit in row_hits:
            assert hit.payload == kb.entity_payload(kb.entity_row[hit.docid])
