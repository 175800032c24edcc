"""MEMORA-R trainer: [r; q] collation, recipes, a tiny MiniLM run, cached loss == plain loss."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from sentence_transformers.sentence_transformer.training_args import BatchSamplers

from ragym.rl.errors import UsageError
from ragym.rl.retriever.augment import ReasoningQueryCollator, augment_query
from ragym.rl.retriever.cli import apply_overrides
from ragym.rl.retriever.config import (
    RETRIEVER_RECIPES,
    LossConfig,
    ModelConfig,
    load_retriever_recipe,
    recipe_from_dict,
    with_overrides,
)
from ragym.rl.retriever.data import build_train_dataset, load_corpus, read_rows
from ragym.rl.retriever.train import build_loss, build_training_args, load_encoder
from tests.rl.retriever_fixtures import prepared_dir

MINILM = ModelConfig(max_seq_length=32)


@pytest.fixture(scope="module")
def encoder():
    return load_encoder(MINILM)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_dir(tmp_path_factory.mktemp("retriever"))


def _features(n: int = 6) -> list[dict[str, str]]:
    return [{"anchor": f"q{i}", "reasoning": f"r{i}", "positive": f"p{i}"} for i in range(n)]


def _identity_collator(**kwargs) -> ReasoningQueryCollator:
    return ReasoningQueryCollator(preprocess_fn=lambda texts, **_: {"text": texts}, **kwargs)


@pytest.mark.parametrize(
    ("drop_rate", "expected_augmented"),
    [(0.0, 6), (1.0, 0)],
)
def test_collator_builds_r_then_q(drop_rate: float, expected_augmented: int) -> None:
    batch = _identity_collator(separator=" || ", drop_rate=drop_rate)(_features())
    anchors = batch["anchor_text"]
    assert sum(a.startswith("r") for a in anchors) == expected_augmented
    if expected_augmented:
        assert anchors[0] == augment_query("q0", "r0", " || ") == "r0 || q0"
    assert batch["positive_text"] == [f"p{i}" for i in range(6)]  # documents are never augmented
    assert not any(key.startswith("reasoning") for key in batch)  # the loss never sees the trace column


def test_collator_drop_rate_is_seeded_and_redrawn() -> None:
    first = _identity_collator(drop_rate=0.5, seed=3)
    second = _identity_collator(drop_rate=0.5, seed=3)
    draws = [first(_features(40))["anchor_text"] for _ in range(2)]
    assert draws[0] == second(_features(40))["anchor_text"]  # same seed, same decisions
    assert draws[0] != draws[1]  # the next batch redraws
    num_augmented = sum(a.startswith("r") for a in draws[0] + draws[1])
    assert 20 < num_augmented < 60
    with pytest.raises(ValueError, match="drop_rate"):
        _identity_collator(drop_rate=1.5)


def test_committed_recipes_load_and_typos_fail(tmp_path: Path) -> None:
    recipes = sorted(RETRIEVER_RECIPES.glob("*.yaml"))
    assert {p.stem for p in recipes} >= {"memora_r_cpu", "memora_r_qwen3_embedding"}
    for path in recipes:
        recipe = load_retriever_recipe(path)
        assert recipe.augment.use_reasoning and recipe.data.num_hard_negatives >= 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  batchsize: 4\n")
    with pytest.raises(UsageError, match=r"bad.yaml.train: unknown key\(s\) \['batchsize'\]"):
        load_retriever_recipe(bad)
    recipe = apply_overrides(recipe_from_dict({}), ["train.max_steps=3", "augment.separator=' | '"])
    assert recipe.train.max_steps == 3 and recipe.augment.separator == " | "


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.batchsize=3", r"train: unknown key\(s\) \['batchsize'\]"),
        ("trian.max_steps=1", r"recipe: unknown key\(s\) \['trian'\]"),
        ("train.warmup_ratio=1", r"train.warmup_ratio must be in \[0, 1\)"),
    ],
)
def test_an_override_typo_is_one_line_naming_the_key(override: str, message: str) -> None:
    # UsageError is what ragym prints as one line; a TypeError or AttributeError was a traceback
    with pytest.raises(UsageError, match=message):
        apply_overrides(recipe_from_dict({}), [override])


@pytest.mark.parametrize(
    "override",
    [
        "train.num_epochs=0",  # trained nothing, saved the backbone, exited 0
        "train.max_steps=0",  # read by the trainer as "run num_epochs"
        "train.learning_rate=-1",  # torch's traceback after the model loaded
        "train.batch_size=0",
        "loss.scale=0",  # every score equal: nothing to learn
        "loss.name=triplet",  # refused only once the model had loaded
        "data.num_hard_negatives=-1",  # trained with in-batch negatives only, silently
        "data.limit=-1",  # dropped the last training pair, silently
        "augment.drop_rate=2",
    ],
)
def test_a_value_out_of_range_is_refused_naming_its_key(override: str) -> None:
    key = override.partition("=")[0]
    with pytest.raises(UsageError, match=rf"^{key} must be"):
        apply_overrides(recipe_from_dict({}), [override])


def test_dataset_columns_follow_loss_order(data_dir: Path) -> None:
    rows = read_rows(data_dir / "train.jsonl")
    dataset = build_train_dataset(rows, load_corpus(data_dir), num_hard_negatives=1, with_reasoning=True)
    assert dataset.column_names == ["anchor", "reasoning", "positive", "negative_1"]
    assert dataset[0]["positive"] != dataset[0]["negative_1"]
    with pytest.raises(ValueError, match="negatives mined"):
        build_train_dataset(rows, load_corpus(data_dir), num_hard_negatives=2, with_reasoning=False)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"answer_id": "999"}, r"pair 100: document '999' is not in corpus.jsonl"),  # was a bare KeyError
        ({"negative_ids": ["998"]}, r"pair 100: document '998' is not in corpus.jsonl"),
        ({"question": "  "}, r"pair 100: empty question"),  # trained on an empty anchor
        (
            {"negative_ids": ["500"]},
            r"pair 100: its negative_ids name its own answer '500'",
        ),  # positive as negative
        ({"negative_ids": None}, r"pair 100: no field \['negative_ids'\]"),
    ],
)
def test_a_pair_that_cannot_train_is_refused_naming_the_file_and_pair(
    data_dir: Path, edit: dict, message: str
) -> None:
    rows = read_rows(data_dir / "train.jsonl")
    assert rows[0]["question_id"] == "100" and rows[0]["answer_id"] == "500"
    first = {k: v for k, v in {**rows[0], **edit}.items() if v is not None}
    with pytest.raises(UsageError, match=rf"^train.jsonl: {message}"):
        build_train_dataset(
            [first, *rows[1:]], load_corpus(data_dir), num_hard_negatives=1, with_reasoning=True
        )


def test_a_docid_twice_in_the_corpus_is_refused_naming_the_line(data_dir: Path, tmp_path: Path) -> None:
    lines = (data_dir / "corpus.jsonl").read_text().splitlines()
    (tmp_path / "corpus.jsonl").write_text("\n".join([*lines, lines[0]]) + "\n")  # its text silently replaced
    with pytest.raises(
        UsageError, match=rf"corpus.jsonl:{len(lines) + 1}: docid '500' again \(first on line 1\)"
    ):
        load_corpus(tmp_path)


def _batch(encoder, n: int = 8) -> tuple[list[dict], torch.Tensor]:
    collator = ReasoningQueryCollator(preprocess_fn=encoder.preprocess)
    feats = [
        {
            "anchor": f"question {i} about topic {i % 3}",
            "reasoning": f"intent {i}",
            "positive": f"answer {i}",
            "negative_1": f"unrelated text {i}",
        }
        for i in range(n)
    ]
    batch = collator(feats)
    features = []
    for column in ("anchor", "positive", "negative_1"):
        features.append(
            {k.removeprefix(f"{column}_"): v for k, v in batch.items() if k.startswith(f"{column}_")}
        )
    return features, torch.zeros(n)


def _loss_and_grad(loss_fn, encoder, features, labels) -> tuple[float, torch.Tensor]:
    encoder.zero_grad()
    value = loss_fn(features, labels)
    value.backward()
    weight = encoder[0].auto_model.embeddings.word_embeddings.weight
    return float(value), weight.grad.detach().clone()


def test_cached_loss_matches_plain_loss(encoder) -> None:
    encoder.eval()  # no dropout, so both losses see identical embeddings
    features, labels = _batch(encoder)
    plain_value, plain_grad = _loss_and_grad(
        build_loss(encoder, LossConfig("mnrl")), encoder, features, labels
    )
    cached = build_loss(encoder, LossConfig("cached_mnrl", mini_batch_size=3))
    cached_value, cached_grad = _loss_and_grad(cached, encoder, features, labels)
    assert cached_value == pytest.approx(plain_value, rel=1e-5)
    assert torch.allclose(cached_grad, plain_grad, atol=1e-6, rtol=1e-4)
    assert plain_grad.abs().sum() > 0
    with pytest.raises(ValueError, match="loss.name"):
        build_loss(encoder, LossConfig("triplet"))


def test_training_args_follow_the_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    train = with_overrides(
        recipe_from_dict({}),
        train={"output_dir": str(tmp_path), "report_to": ["wandb"], "warmup_ratio": 0.2, "batch_size": 7},
    ).train
    args = build_training_args(train, query_prompt="Instruct: find evidence\nQuery:")
    assert os.environ["WANDB_MODE"] == "offline"  # no key: log to disk instead of failing
    assert args.per_device_train_batch_size == 7 and args.warmup_steps == 0.2 and args.report_to == ["wandb"]
    assert args.prompts == {"anchor": "Instruct: find evidence\nQuery:"}  # queries only, documents bare
    assert args.batch_sampler == BatchSamplers.NO_DUPLICATES
    assert build_training_args(train, query_prompt=None).prompts is None
