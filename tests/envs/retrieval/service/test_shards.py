"""Shards: index files + id maps, merged by score, give what one index over every row gives."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.service.app import RetrievalApp
from ragym.envs.retrieval.service.shards import ShardedRetriever, merge_hits, read_manifest, split_into_shards
from ragym.envs.retrieval.service.wire import loads
from ragym.envs.serving.catalog import CatalogSpec, load_catalog
from tests.envs.retrieval.service.helpers import ids, random_faiss


def test_sharded_flat_index_equals_one_flat_index(tmp_path: Path) -> None:
    whole, vectors = random_faiss(num=700, dim=16, seed=4)
    docids = [f"d{i}" for i in range(700)]
    manifest = split_into_shards(vectors, docids, 3, tmp_path / "shards")
    dim, specs = read_manifest(manifest)
    assert dim == 16 and len(specs) == 3
    sharded = ShardedRetriever.from_manifest(manifest)
    assert [s.index.ntotal for s in sharded.shards] == [234, 233, 233]
    queries = list(vectors[:12] + 0.05)
    for k in (1, 5, 40):
        got, want = sharded.batch_search(queries, k), whole.batch_search(queries, k)
        assert ids(got) == ids(want)
        assert [h.score for x in got for h in x] == pytest.approx(
            [h.score for x in want for h in x], rel=1e-5
        )


def test_merge_keeps_the_best_k_and_breaks_ties_by_shard_then_rank() -> None:
    a = [Hit("a1", 0.9), Hit("a2", 0.5), Hit("a3", 0.1)]
    b = [Hit("b1", 0.7), Hit("b2", 0.5)]
    assert [h.docid for h in merge_hits([a, b], 4)] == ["a1", "b1", "a2", "b2"]
    assert [h.docid for h in merge_hits([b, a], 4)] == ["a1", "b1", "b2", "a2"]
    assert merge_hits([[], []], 3) == []


def test_the_service_serves_a_shard_set_by_name(tmp_path: Path) -> None:
    whole, vectors = random_faiss(num=300, dim=16, seed=5)
    manifest = split_into_shards(vectors, [f"d{i}" for i in range(300)], 2, tmp_path / "s")
    app = RetrievalApp(lambda: load_catalog(CatalogSpec(shard_sets=(("passages", str(manifest)),))))

    async def run():
        await app.start()
        return await app.search("passages", [vectors[7]], 4)

    assert [h["docid"] for h in loads(asyncio.run(run())[0])] == [
        h.docid for h in whole.search(vectors[7], 4)
    ]
    assert app.retrievers["passages"].query == "vector" and app.retrievers["passages"].dim == 16


def test_manifest_errors_are_clear(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"dim": 4, "shards": []}))
    with pytest.raises(ValueError, match="non-empty 'shards'"):
        read_manifest(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="nothing to serve"):
        CatalogSpec()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"shards": [', "not a JSON shard manifest"),
        ("[1]", "non-empty 'shards' list"),
        ('{"shards": [{"index": "a.faiss", "ids": "a.txt"}]}', "needs 'dim'"),
        ('{"dim": 8, "shards": [{"ids": "a.txt"}]}', "each shard needs 'index' and 'ids'"),
        ('{"dim": 8, "shards": ["a.faiss"]}', "each shard needs 'index' and 'ids'"),
    ],
)
def test_a_manifest_of_another_shape_is_one_line_from_ragym_serve(
    tmp_path: Path, text: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragym.rl.cli import main

    manifest = tmp_path / "shards.json"
    manifest.write_text(text)
    with pytest.raises(ValueError, match=f"{manifest}: .*{why}"):
        read_manifest(manifest)
    with pytest.raises(SystemExit, match=f"ragym serve: {manifest}: .*{why}"):
        main(["serve", "--shards", f"docs={manifest}", "--port", "1"])  # never binds


def test_a_shard_with_the_wrong_id_count_is_refused(tmp_path: Path) -> None:
    _, vectors = random_faiss(num=50, dim=8)
    manifest = split_into_shards(vectors, [f"d{i}" for i in range(50)], 1, tmp_path)
    (tmp_path / "shard_000.ids.txt").write_text("d0\nd1\n")
    with pytest.raises(ValueError, match="50 vectors but 2 docids"):
        ShardedRetriever.from_manifest(manifest)


def test_a_shard_of_another_width_than_its_manifest_is_refused_at_load(tmp_path: Path) -> None:
    """A shard built with another encoder (384-d among 768-d) loaded, and every search then failed on the query's
    width, after the whole index had loaded."""
    _, vectors = random_faiss(num=50, dim=8)
    manifest = split_into_shards(vectors, [f"d{i}" for i in range(50)], 2, tmp_path)
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "dim": 16}))
    with pytest.raises(
        ValueError, match=r"shard_000.faiss: an index of 8-d vectors, but its manifest says dim 16$"
    ):
        ShardedRetriever.from_manifest(manifest)


def test_a_manifest_naming_a_missing_file_stops_ragym_serve_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragym.rl.cli import main

    _, vectors = random_faiss(num=50, dim=8, seed=1)
    manifest = split_into_shards(vectors, [f"d{i}" for i in range(50)], 2, tmp_path / "shards")
    (tmp_path / "shards" / "shard_001.faiss").unlink()
    with pytest.raises(FileNotFoundError, match="1 missing file.*shard_001.faiss"):
        read_manifest(manifest)
    assert main(["serve", "--shards", f"docs={manifest}", "--port", "1"]) == 2  # never binds
    err = capsys.readouterr().err
    assert "ragym serve:" in err and "shard_001.faiss" in err and "Traceback" not in err
