"""Every prep that encodes goes through the encoding step: a spy on ``pipeline.run_shards`` sees its items,
and the vectors the prep writes are the step's (the same as the encoders' own methods give)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np
import pandas as pd
import pytest

from ragym.data_prep.encoding import pipeline
from ragym.data_prep.mmlongbench_doc import PrepConfig, build_store
from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.envs.image_cache import read_image
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.retrieval.encoders import PixelImageEncoder, SentenceEncoder
from ragym.envs.retrieval.page_encoders import TextPageEncoder
from tests.data_prep.test_mmlongbench_doc import write_pdf


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The ids each ``run_shards`` call encoded, in call order."""
    calls: list[list[str]] = []
    real = pipeline.run_shards

    def recording(work, encoder, root, cfg, bar=None):  # noqa: ANN001, ANN202
        calls.append([])

        def seen():  # noqa: ANN202
            for index, items in work:
                calls[-1].extend(i.id for i in items)
                yield index, items

        return real(seen(), encoder, root, cfg, bar)

    monkeypatch.setattr(pipeline, "run_shards", recording)
    return calls


@pytest.mark.slow  # builds a KB and loads a sentence-transformers model: ~15 s on an idle machine
def test_synthetic_kb_encodes_entities_queries_and_passages_through_the_step(spy, tmp_path: Path) -> None:
    from ragym.data_prep.encoding.tiny import build_tiny_text_encoder

    # A tiny BERT stands in for E5 (same loader, same ``passage: `` prefix), so no download is needed.
    tiny = str(build_tiny_text_encoder(tmp_path / "tiny", hidden=32, layers=1))
    kb_dir = build_kb(
        tmp_path / "kb",
        replace(PRESETS["tiny"], num_entities=30, num_rows=8),
        text_encoder={"name": "e5", "kwargs": {"model_path": tiny}},
    )
    kb = load_kb(kb_dir)
    num_queries = len(kb.queries)
    assert spy == [
        [f"E{i:06d}" for i in range(30)],
        [f"Q{i:06d}" for i in range(num_queries)],
        [f"P{i:06d}" for i in range(30)],
    ]
    pixels = [read_image(kb_dir / p) for p in kb.entities["image"]]
    expected = PixelImageEncoder().encode_entities(pixels, [])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(kb.entity_embeddings, expected, atol=1e-6)
    index = kb.manifest["index"]["entities"]
    assert index["kind"] == "exact" and index["num_vectors"] == 30 and index["recall@15"] == 1.0
    assert (kb_dir / index["path"] / "index.json").is_file()
    passages = SentenceEncoder(tiny, passage_prefix="passage: ").encode_passages(kb.passages["text"].tolist())
    stored = np.load(kb_dir / "index" / "passage_embeddings.npy")
    np.testing.assert_allclose(stored, passages / np.linalg.norm(passages, axis=1, keepdims=True), atol=1e-5)


def test_docmemo_pages_go_through_the_step(spy, tmp_path: Path) -> None:
    pdf = write_pdf(tmp_path / "report.pdf")
    encoder = TextPageEncoder()
    store = build_store(pdf, tmp_path / "store", "report.pdf", encoder, PrepConfig(dpi=40))
    assert spy == [[f"report.pdf#{n}" for n in range(1, 5)]]
    np.testing.assert_allclose(store.embeddings, encoder.encode_pages(list(store.texts), []), atol=1e-6)


def test_memora_r_export_encodes_the_corpus_through_the_step(spy, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from ragym.data_prep.encoding.tiny import build_tiny_text_encoder
    from ragym.rl.retriever.export import export_retriever

    model = SentenceTransformer(str(build_tiny_text_encoder(tmp_path / "tiny", hidden=32, layers=1)))
    corpus = {f"d{i}": f"document number {i} about topic {i % 3}" for i in range(10)}
    export_retriever(model, corpus, tmp_path / "export", batch_size=4)
    assert spy == [list(corpus)]
    index = faiss.read_index(str(tmp_path / "export" / "index" / "shard-000.faiss"))  # 10 documents: exact
    expected = model.encode(list(corpus.values()), normalize_embeddings=True)
    np.testing.assert_allclose(index.reconstruct_n(0, index.ntotal), expected, atol=1e-5)


def test_r3g_image_corpora_go_through_the_step(spy, tmp_path: Path) -> None:
    from ragym.data_prep.r3g_synthetic import Preset, build_task

    task = build_task(
        tmp_path / "task", Preset(num_classes=3, images_per_class=2, queries_per_class=1), seed=0
    )
    corpus = pd.read_parquet(task / "corpus" / "corpus.parquet")
    queries = pd.read_parquet(task / "queries" / "queries.parquet")
    assert spy == [corpus["image_id"].tolist(), [f"q{i}" for i in range(len(queries))]]
    pixels = [read_image(task / p) for p in corpus["path"]]
    expected = PixelImageEncoder().encode_entities(pixels, [])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(np.load(task / "corpus" / "embeddings.npy"), expected, atol=1e-6)
