"""The settings the cotrain grid relies on: SGD rounds, mined hard negatives, a zero-margin guard, its own split."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from ragym.envs.kbvqa.harvest import Harvest, Label
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.registry import synthetic_data
from ragym.envs.retrieval.versions import load_query_encoder
from ragym.rl.cotrain.buffer import HarvestBuffer, HeldOut
from ragym.rl.cotrain.config import CotrainConfig
from ragym.rl.cotrain.controller import CoTraining
from ragym.rl.cotrain.round import RoundSpec, hard_negatives, query_vectors, recall, run_round
from tests.rl.cotrain.helpers import options, tiny_rows, weak_encoder
from tests.rl.cotrain.test_round import _version


@pytest.fixture(autouse=True)
def _kb_serves_its_own_query_side():
    """Each test swaps versions into the tiny KB's shared query slot; later tests expect none there."""
    yield
    load_kb(synthetic_data("kbvqa", "tiny")).query_slot.swap(None)


def _gold_pairs(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(query image, gold, question) of every image of ``rows``."""
    found = []
    for row in rows:
        opts = options(row)
        found += [
            (q, g, opts["question"]) for q, g in zip(opts["query_images"], opts["gold_entities"], strict=True)
        ]
    return found


def _round(
    tmp_path: Path, name: str, labelled: list[tuple[str, str, str]], **settings
) -> tuple[CoTraining, dict]:
    """One inline round from the weak encoder on ``labelled`` (each gold confirmed at step 1)."""
    weak = weak_encoder(tmp_path / "weak")
    cfg = CotrainConfig(enable=True, initial_encoder=str(weak), background=False, **settings)
    cotrain = CoTraining(cfg, tmp_path / name, tiny_rows("train"), tiny_rows("test"), None)
    cotrain.buffer.add(1, Harvest([Label(q, question, (g,), ()) for q, g, question in labelled]))
    spec = RoundSpec(
        cotrain.kb_dir,
        str(cotrain.buffer.folder),
        1,
        str(weak),
        str(tmp_path / name / "v1"),
        "v1",
        cotrain.guard_pairs,
        (1, 3),
        asdict(cfg),
    )
    return cotrain, run_round(spec)


def test_an_sgd_round_moves_the_query_map_only_along_the_harvested_queries(tmp_path: Path) -> None:
    """optimiser sgd: one harvested image q gives W' - W = g q^T, so W' v = W v for every v orthogonal to q;
    AdamW's per-weight steps move the whole map."""
    labelled = _gold_pairs(tiny_rows("train"))[:1]
    moved = {}
    for optimiser in ("sgd", "adamw"):
        cotrain, _ = _round(
            tmp_path, optimiser, labelled, optimiser=optimiser, lr=0.5 if optimiser == "sgd" else 5e-3
        )
        q = query_vectors(cotrain.kb, [labelled[0][0]])[0].astype(np.float64)
        v = np.random.default_rng(0).standard_normal(q.shape[0])
        v -= (v @ q) / (q @ q) * q  # orthogonal to the harvested query
        delta = (
            load_query_encoder(tmp_path / optimiser / "v1").matrix
            - load_query_encoder(tmp_path / "weak").matrix
        )
        assert np.abs(delta).max() > 1e-3, optimiser  # the round trained
        moved[optimiser] = float(np.linalg.norm(delta @ v) / np.linalg.norm(delta @ q))
    assert moved["sgd"] < 1e-4 < 0.1 < moved["adamw"], moved


def test_mined_negatives_are_the_serving_versions_top_entities_around_the_gold(tmp_path: Path) -> None:
    cotrain, _ = _round(tmp_path, "r", _gold_pairs(tiny_rows("train"))[:4])
    image, gold, question = _gold_pairs(tiny_rows("train"))[0]
    cotrain.buffer.add(2, Harvest([Label(image, question, (), ("E-harvested",))]))
    serving = load_query_encoder(tmp_path / "weak")
    found = hard_negatives(cotrain.buffer, 2, cotrain.kb, serving, [(image, gold, "x")], 3)[image]
    ranked = cotrain.kb.entities["entity_id"].tolist()
    scores = (
        serving.encode(query_vectors(cotrain.kb, [image]))[0] @ np.asarray(cotrain.kb.entity_embeddings).T
    )
    top = [ranked[i] for i in np.argsort(-scores) if ranked[i] != gold][:3]
    assert found == ["E-harvested", *top] and gold not in found


def test_mined_negatives_raise_r1_on_the_harvested_images_over_in_batch_ones(tmp_path: Path) -> None:
    """What R@1 needs: the gold scored against the look-alikes ranked beside it, not only other images' golds."""
    labelled = _gold_pairs(tiny_rows("train"))
    train = tuple((q, g) for q, g, _ in labelled)
    top1 = {}
    for mined in (0, 8):
        cotrain, _ = _round(
            tmp_path, f"m{mined}", labelled, optimiser="sgd", lr=0.5, round_steps=120, mined_negatives=mined
        )
        top1[mined] = recall(cotrain.kb, load_query_encoder(tmp_path / f"m{mined}" / "v1"), train, (1,))[
            "recall@1"
        ]
    assert top1[8] > top1[0], top1  # measured 0.54 -> 0.62 on the 39 images


def test_a_zero_margin_guard_refuses_any_drop_in_r1(tmp_path: Path) -> None:
    cfg = CotrainConfig(enable=True, background=False, guard_k=1, max_recall_drop=0.0)
    cotrain = CoTraining(cfg, tmp_path, tiny_rows("train"), tiny_rows("test"), None)
    cotrain.guard_and_swap(2, _version(tmp_path / "down", "down", new=0.49, serving=0.50))  # one image of 48
    assert cotrain.retriever.version is None and cotrain.counts["cotrain/swaps_skipped"] == 1
    cotrain.guard_and_swap(3, _version(tmp_path / "level", "level", new=0.50, serving=0.50))
    assert cotrain.retriever.version == "level"


def test_the_guard_reads_its_own_rows_and_recall_is_reported_on_the_held_out_rows(tmp_path: Path) -> None:
    """guard_rows: a validation split of training rows selects versions; retriever/recall@k stays on the
    held-out rows (a guard on those would report its own selection); neither set's labels are harvested."""
    train, test = tiny_rows("train"), tiny_rows("test")
    guard = train[::5]
    cotrain = CoTraining(
        CotrainConfig(enable=True, background=False), tmp_path, train, guard, None, None, test
    )
    guard_pairs = {(q, g) for q, g, _ in _gold_pairs(guard)}
    test_pairs = tuple((q, g) for q, g, _ in _gold_pairs(test))
    assert set(cotrain.guard_pairs) == guard_pairs and not guard_pairs & set(test_pairs)
    weak = load_query_encoder(weak_encoder(tmp_path / "weak"))
    cotrain.retriever.swap(weak)
    assert cotrain.serving_recall() == {
        f"retriever/{k}": v for k, v in recall(cotrain.kb, weak, test_pairs, (1, 3)).items()
    }
    image, gold, question = next(iter(_gold_pairs(guard)))
    held, kept = _gold_pairs(test)[0], _gold_pairs(train[1:2])[0]
    labels = [Label(q, x, (g,), ()) for q, g, x in ((image, gold, question), held, kept)]
    metrics = HarvestBuffer(tmp_path / "b", cotrain.held_out).add(1, Harvest(labels))
    assert metrics["cotrain/heldout_refused"] == 2 and metrics["cotrain/buffer_labels"] == 1
    assert isinstance(cotrain.held_out, HeldOut)
