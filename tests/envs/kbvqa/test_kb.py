"""The on-disk KB format: loader cache, layout checks, payloads without gold labels."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragym.envs.image_cache import read_image
from ragym.envs.kbvqa.kb import KB_FORMAT, load_kb


def test_loading_twice_returns_the_cached_kb(tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    assert load_kb(str(tiny_kb)) is kb
    assert kb.image_retriever() is kb.image_retriever()


def test_tables_line_up_with_embeddings(tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    assert kb.entity_embeddings.shape[0] == len(kb.entities) == kb.manifest["num_entities"]
    assert kb.query_embeddings.shape[0] == len(kb.queries)
    assert np.allclose(np.linalg.norm(kb.entity_embeddings, axis=1), 1.0, atol=1e-5)
    assert set(kb.passages["entity_id"]) <= set(kb.entities["entity_id"])
    assert all(set(c) <= set(kb.entity_row) for c in kb.queries["candidates"])


def test_payloads_show_name_image_and_signature_only(tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    payload = kb.entity_payload(0)
    assert set(payload) == {"name", "image", "signature"}
    assert read_image(payload["image"]).shape == (56, 56, 3)


@pytest.mark.parametrize("broken", ["entities.parquet", "index/entity_embeddings.npy", "kb.json"])
def test_missing_files_are_named(tiny_kb: Path, tmp_path: Path, broken: str) -> None:
    copy = tmp_path / "kb"
    shutil.copytree(tiny_kb, copy)
    (copy / broken).unlink()
    with pytest.raises(FileNotFoundError, match=broken.split("/")[-1]):
        load_kb(copy)


def test_wrong_format_version_is_an_error(tiny_kb: Path, tmp_path: Path) -> None:
    copy = tmp_path / "kb"
    shutil.copytree(tiny_kb, copy)
    manifest = json.loads((copy / "kb.json").read_text())
    (copy / "kb.json").write_text(json.dumps({**manifest, "format": KB_FORMAT, "version": 99}))
    with pytest.raises(ValueError, match="version"):
        load_kb(copy)


def test_entity_vectors_are_mapped_not_copied_into_each_process(tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    assert isinstance(kb.entity_embeddings, np.memmap) and not kb.entity_embeddings.flags.writeable
    assert Path(kb.entity_embeddings.filename) == (tiny_kb / "index" / "entity_embeddings.npy").resolve()


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ("entity_embeddings.npy", "entity_embeddings.npy: not a whole .npy array"),
        ("query_embeddings.npy", "query_embeddings.npy: not a whole .npy array"),
    ],
)
def test_an_embeddings_file_cut_short_is_named(tiny_kb: Path, tmp_path: Path, broken: str, why: str) -> None:
    copy = tmp_path / "kb"
    shutil.copytree(tiny_kb, copy)
    path = copy / "index" / broken
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match=why):
        load_kb(copy)


@pytest.mark.parametrize("shape", [(80, 64), (79, 192)])
def test_query_embeddings_of_another_width_or_count_are_refused(
    tiny_kb: Path, tmp_path: Path, shape: tuple[int, int]
) -> None:
    copy = tmp_path / "kb"
    shutil.copytree(tiny_kb, copy)
    np.save(copy / "index" / "query_embeddings.npy", np.full(shape, 0.1, dtype=np.float32))
    width = load_kb(tiny_kb).entity_embeddings.shape[1]
    with pytest.raises(
        ValueError,
        match=rf"query_embeddings.npy holds \({shape[0]}, {shape[1]}\) vectors for 80 queries and {width}-d",
    ):
        load_kb(copy)


def test_an_entity_id_on_two_rows_is_refused(tiny_kb: Path, tmp_path: Path) -> None:
    import pandas as pd

    copy = tmp_path / "kb"
    shutil.copytree(tiny_kb, copy)
    entities = pd.read_parquet(copy / "entities.parquet")
    entities.loc[5, "entity_id"] = entities.loc[2, "entity_id"]
    entities.to_parquet(copy / "entities.parquet")
    with pytest.raises(
        ValueError,
        match=rf"entities.parquet: 1 entity ids name two rows: \['{entities.loc[2, 'entity_id']}'\]",
    ):
        load_kb(copy)


def test_passage_vectors_cut_short_are_named_when_dense_search_loads(tiny_kb: Path, tmp_path: Path) -> None:
    copy = tmp_path / "kb"
    shutil.copytree(tiny_kb, copy)
    manifest = json.loads((copy / "kb.json").read_text())
    (copy / "kb.json").write_text(json.dumps({**manifest, "text_encoder": {"name": "minilm"}}))
    np.save(copy / "index" / "passage_embeddings.npy", np.ones((60, 8), dtype=np.float32))
    path = copy / "index" / "passage_embeddings.npy"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(ValueError, match="passage_embeddings.npy: not a whole .npy array"):
        load_kb(copy).text_retriever("dense")  # before the text encoder loads
