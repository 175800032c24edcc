"""The paper's two encoders on tiny models of their real architectures, built from config (no download), loaded
by path through the same code as the real ones: EVA-CLIP (remote-code model with ``encode_image`` /
``encode_text``, CLIP processor and tokenizer) and E5 (a BERT checkpoint read by sentence-transformers)."""

from __future__ import annotations

import importlib.util
import json
import string
from pathlib import Path

import numpy as np
import pytest

from ragym.data_prep.prep import prep_dataset
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.retrieval.encoders import EvaClipImageEncoder, make_text_encoder
from tests.data_prep import kbvqa_fixtures as fx

EVA_MODULE = '''
from transformers import CLIPConfig, CLIPModel


class TinyEvaClipConfig(CLIPConfig):
    model_type = "tiny_evaclip"


class TinyEvaClip(CLIPModel):
    """EVA-CLIP's remote-code interface (encode_image / encode_text) over a CLIP body."""

    config_class = TinyEvaClipConfig

    def encode_image(self, pixel_values):
        return self.get_image_features(pixel_values=pixel_values).pooler_output

    def encode_text(self, input_ids):
        return self.get_text_features(input_ids=input_ids).pooler_output
'''
PROJECTION = 8


def _vocab() -> dict[str, int]:
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in string.ascii_lowercase + string.digits + ".,'-":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    return vocab


@pytest.fixture(scope="module")
def eva_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny EVA-CLIP-like checkpoint folder: remote code, weights, CLIP image processor and tokenizer."""
    from transformers import CLIPImageProcessor, CLIPTokenizer

    folder = tmp_path_factory.mktemp("tiny_evaclip")
    (folder / "modeling_tiny_evaclip.py").write_text(EVA_MODULE)
    spec = importlib.util.spec_from_file_location(
        "modeling_tiny_evaclip", folder / "modeling_tiny_evaclip.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    vocab = _vocab()
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt")).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        folder
    )
    config = module.TinyEvaClipConfig(
        text_config=dict(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=77,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        ),
        vision_config=dict(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=PROJECTION,
    )
    config.auto_map = {
        "AutoConfig": "modeling_tiny_evaclip.TinyEvaClipConfig",
        "AutoModel": "modeling_tiny_evaclip.TinyEvaClip",
    }
    module.TinyEvaClip(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def e5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny E5-like checkpoint: a BERT encoder and WordPiece tokenizer (sentence-transformers mean-pools it)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny_e5")
    words = sorted({w.strip(".,!?").lower() for w in fx.TEXT.split()} | {"query", "passage", ":"})
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    config = BertConfig(
        vocab_size=5 + len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    return folder


def test_eva_clip_entity_is_image_then_title_and_query_is_image_twice(eva_dir: Path) -> None:
    encoder = EvaClipImageEncoder(str(eva_dir), str(eva_dir), device="cpu", batch_size=2)
    photos = [np.asarray(fx.photo(i)) for i in range(3)]
    entities = encoder.encode_entities(photos, ["astronaut", "coffee cup", "cat"])
    queries = encoder.encode_queries(photos)
    assert entities.shape == queries.shape == (3, 2 * PROJECTION)
    assert np.allclose(entities[:, :PROJECTION], queries[:, :PROJECTION], atol=1e-5)  # same image feature
    assert np.allclose(queries[:, :PROJECTION], queries[:, PROJECTION:])
    assert not np.allclose(entities[0, PROJECTION:], entities[1, PROJECTION:])  # the title half differs
    assert np.allclose(np.linalg.norm(entities[:, PROJECTION:], axis=1), 1.0, atol=1e-5)


def test_e5_prefixes_queries_and_passages(e5_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    encoder = make_text_encoder({"name": "e5", "kwargs": {"model_path": str(e5_dir)}})
    plain = SentenceTransformer(str(e5_dir), device="cpu")
    texts = ["the cat is famous", "it was described in 1887"]
    assert np.allclose(encoder.encode_queries(texts), plain.encode([f"query: {t}" for t in texts]), atol=1e-5)
    assert np.allclose(
        encoder.encode_passages(texts), plain.encode([f"passage: {t}" for t in texts]), atol=1e-5
    )
    assert not np.allclose(encoder.encode_queries(texts), encoder.encode_passages(texts))


def test_prep_with_both_real_encoders(eva_dir: Path, e5_dir: Path, tmp_path: Path) -> None:
    fx.write_infoseek(tmp_path / "raw")
    image = {
        "name": "eva_clip",
        "kwargs": {"model_path": str(eva_dir), "processor_path": str(eva_dir), "device": "cpu"},
    }
    text = {"name": "e5", "kwargs": {"model_path": str(e5_dir)}}
    report = prep_dataset(
        "infoseek",
        [
            "--raw",
            str(tmp_path / "raw"),
            "--out",
            str(tmp_path / "kb"),
            "--image-encoder",
            json.dumps(image),
            "--text-encoder",
            json.dumps(text),
        ],
    )
    assert report["details"]["index_dim"] == 2 * PROJECTION
    kb = load_kb(tmp_path / "kb")
    imageless = (kb.entities["image"] == "images/no_image.png").to_numpy()
    assert imageless.sum() == 1
    # An entity without an image is indexed by its title alone: the image half is zero.
    assert np.allclose(kb.entity_embeddings[imageless, :PROJECTION], 0.0)
    assert not np.allclose(kb.entity_embeddings[~imageless, :PROJECTION], 0.0)
    vectors = np.load(tmp_path / "kb" / "index" / "passage_embeddings.npy")
    assert vectors.shape == (len(kb.passages), 16)
    hits = kb.text_retriever("dense").search("how tall is the cat", 3)
    assert len(hits) == 3 and all(h.docid.startswith("P") for h in hits)


def _row_env(kb: Path, split: str):
    """The env a prepared row starts (its own env kwargs, nothing added), reset on that row."""
    import pandas as pd

    from ragym import envs

    row = pd.read_parquet(kb / "data" / f"{split}.parquet").iloc[0]
    env = envs.make_env("KBVQA-v0", **json.loads(row["extra_info"]["env_kwargs"]))
    env.reset(options=json.loads(row["extra_info"]["env_options"]))
    return env


def test_a_kb_prepared_with_e5_searches_text_with_e5(e5_dir: Path, tmp_path: Path) -> None:
    """MMAgent-R² C.1: text search is dense E5; rows of a KB with E5 vectors use it without being told."""
    from ragym.envs.events import events_of
    from ragym.envs.kbvqa.actions import SearchText, format_action

    fx.write_infoseek(tmp_path / "raw")
    text = {"name": "e5", "kwargs": {"model_path": str(e5_dir)}}
    prep_dataset(
        "infoseek",
        ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb"), "--text-encoder", json.dumps(text)],
    )
    assert json.loads((tmp_path / "kb" / "kb.json").read_text())["text_retrievers"] == ["bm25", "dense"]
    for split in ("train", "val"):
        env = _row_env(tmp_path / "kb", split)
        _, _, _, _, info = env.step(format_action(SearchText(("how tall is the cat",))))
        assert events_of(info["events"], "task")[0]["text_retriever"] == "dense"
        served = events_of(info["events"], "search_text")[0]["passage_ids"]
        dense = load_kb(tmp_path / "kb").text_retriever("dense").search("how tall is the cat", 3)
        assert served == [h.docid for h in dense]


def test_a_kb_prepared_without_a_text_encoder_searches_with_bm25(prepared) -> None:
    from ragym import envs

    kb, _, _ = prepared["infoseek"]
    assert json.loads((kb / "kb.json").read_text())["text_retrievers"] == ["bm25"]
    env = _row_env(kb, "val")
    assert env.state.events[0]["text_retriever"] == "bm25"
    with pytest.raises(ValueError, match=r"text_retriever='dense' but the KB .* has only \['bm25'\]"):
        envs.make_env("KBVQA-v0", kb_dir=str(kb), text_retriever="dense")
