"""A co-training round raises held-out recall of a weak query encoder; the forgetting guard swaps or skips."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from ragym.envs.kbvqa.harvest import Harvest, Label
from ragym.envs.retrieval.versions import QueryEncoder, load_query_encoder, save_query_encoder
from ragym.rl.cotrain.config import CotrainConfig, read_cotrain
from ragym.rl.cotrain.controller import CoTraining
from ragym.rl.cotrain.round import RoundSpec, run_round
from ragym.rl.errors import UsageError
from tests.rl.cotrain.helpers import options, tiny_rows, weak_encoder


def _labelled(cotrain: CoTraining) -> None:
    """Step 1's harvest: each training row's gold confirmed (what a verifying policy's episodes give)."""
    harvest = Harvest()
    for row in tiny_rows("train"):
        opts = options(row)
        for query, gold in zip(opts["query_images"], opts["gold_entities"], strict=True):
            harvest.labels.append(Label(query, opts["question"], (gold,), ()))
    cotrain.buffer.add(1, harvest)


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_a_round_raises_held_out_recall_of_a_weak_encoder(tmp_path: Path, mode: str) -> None:
    weak = weak_encoder(tmp_path / "weak")
    cfg = CotrainConfig(
        enable=True,
        initial_encoder=str(weak),
        background=False,
        mode=mode,
        round_steps=80,
        lr=5e-3 if mode == "full" else 2e-2,
    )
    cotrain = CoTraining(cfg, tmp_path, tiny_rows("train"), tiny_rows("test"), None)
    _labelled(cotrain)
    spec = RoundSpec(
        cotrain.kb_dir,
        str(cotrain.buffer.folder),
        1,
        str(weak),
        str(tmp_path / "v1"),
        "v1",
        cotrain.guard_pairs,
        (1, 3),
        asdict(cfg),
    )
    meta = run_round(spec)
    assert meta["num_harvested_pairs"] > 0 and meta["serving"] == "weak"
    # the pool (R@3): 9 held-out images, measured 0.22 -> 0.78-0.89 (R@1 moves less on 9 images)
    assert meta["new_recall@3"] > meta["serving_recall@3"] + 0.3, meta
    assert load_query_encoder(tmp_path / "v1").version == "v1"


def _version(folder: Path, name: str, new: float, serving: float) -> str:
    """A version whose recorded held-out recall@1 is ``new`` against the serving one's ``serving``."""
    matrix = load_query_encoder(weak_encoder(folder.parent / f"{name}-base", seed=3)).matrix
    meta = {"step": 2, "new_recall@1": new, "serving_recall@1": serving}
    return str(save_query_encoder(QueryEncoder(name, matrix, meta), folder))


def test_the_forgetting_guard_skips_a_drop_beyond_the_margin_and_swaps_otherwise(tmp_path: Path) -> None:
    cfg = CotrainConfig(enable=True, background=False, max_recall_drop=0.05)
    cotrain = CoTraining(cfg, tmp_path, tiny_rows("train"), tiny_rows("test"), None)
    assert cotrain.retriever.version is None
    metrics = cotrain.guard_and_swap(2, _version(tmp_path / "bad", "bad", new=0.40, serving=0.50))
    assert cotrain.retriever.version is None and cotrain.counts["cotrain/swaps_skipped"] == 1
    assert metrics["cotrain/new_recall@1"] == 0.40
    cotrain.guard_and_swap(3, _version(tmp_path / "ok", "ok", new=0.46, serving=0.50))  # within the margin
    assert cotrain.retriever.version == "ok" and cotrain.counts["cotrain/swaps"] == 1
    decisions = [
        json.loads(line)["decision"]
        for line in (tmp_path / "cotrain" / "swaps.jsonl").read_text().splitlines()
    ]
    assert decisions == ["skipped", "swapped"]
    # a resume from step 2 serves what step 2 served (nothing); from step 3, the swapped version
    assert CoTraining(cfg, tmp_path, tiny_rows("train"), tiny_rows("test"), 3).retriever.version == "ok"
    cotrain.retriever.swap(None)


def test_update_documents_is_built_and_its_rate_must_be_positive() -> None:
    """Once refused as not built; tests/rl/cotrain/test_documents.py tests what it does."""
    assert replace(CotrainConfig(), update_documents=True).update_documents
    with pytest.raises(UsageError, match=r"ragym.cotrain.document_lr must be > 0, got 0.0"):
        CotrainConfig(update_documents=True, document_lr=0.0)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"enable": "no"},
            r"ragym.cotrain.enable 'no' is not true or false; set ragym.cotrain.enable=true or",
        ),  # was on: "no" is true
        ({"background": "false"}, r"ragym.cotrain.background 'false' is not true or false"),
        ({"lr": "abc"}, r"ragym.cotrain.lr must be a number, got 'abc'"),  # was a TypeError traceback
        ({"scale": "20"}, r"ragym.cotrain.scale must be a number, got '20'"),
    ],
)
def test_a_switch_given_as_a_word_or_a_number_that_is_not_one_is_refused(values: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        read_cotrain(values)


def test_the_guard_reads_recall_at_guard_k(tmp_path: Path) -> None:
    """A version that gains in the pool (R@3) but loses at the top (R@1) swaps under guard_k 3 only."""
    matrix = load_query_encoder(weak_encoder(tmp_path / "base", seed=3)).matrix
    meta = {
        "step": 2,
        "new_recall@1": 0.30,
        "serving_recall@1": 0.40,
        "new_recall@3": 0.70,
        "serving_recall@3": 0.50,
    }
    folder = str(save_query_encoder(QueryEncoder("pool", matrix, meta), tmp_path / "pool"))
    decisions = {}
    for k in (1, 3):
        cfg = CotrainConfig(enable=True, background=False, guard_k=k)
        cotrain = CoTraining(cfg, tmp_path / f"k{k}", tiny_rows("train"), tiny_rows("test"), None)
        cotrain.guard_and_swap(2, folder)
        decisions[k] = cotrain.retriever.version
        cotrain.retriever.swap(None)
    assert decisions == {1: None, 3: "pool"}


def test_a_stronger_initial_distortion_weakens_the_retriever_more(tmp_path: Path) -> None:
    """initial_noise_strength sets how far the miniature's initial query side is from the KB's own."""
    recalls = []
    for strength in (0.5, 2.0):
        cfg = CotrainConfig(initial_noise_rank=8, initial_noise_strength=strength)
        cotrain = CoTraining(cfg, tmp_path / str(strength), tiny_rows("train"), tiny_rows("test"), None)
        recalls.append(cotrain.serving_recall()["retriever/recall@3"])
        cotrain.retriever.swap(None)
    assert recalls[0] > recalls[1], recalls


def test_a_background_round_runs_in_its_own_process_and_the_step_is_not_held(tmp_path: Path) -> None:
    """``background`` (the default) without Ray: the round runs in a spawned process; the steps meanwhile report it
    running and go on, and the step after it finishes guards and swaps its version."""
    weak = weak_encoder(tmp_path / "weak")
    cfg = CotrainConfig(enable=True, initial_encoder=str(weak), round_steps=40, max_recall_drop=1.0)
    assert cfg.background
    cotrain = CoTraining(cfg, tmp_path, tiny_rows("train"), tiny_rows("test"), None)
    _labelled(cotrain)
    try:
        cotrain._start_round(2)
        spec, handle = cotrain.pending
        assert handle.is_alive()  # a process of its own, started and returned from at once
        assert cotrain._finish_round(3) == {"cotrain/round_running": 1.0}
        handle.join(timeout=300)  # a hang guard: the round takes seconds
        assert handle.exitcode == 0
        metrics = cotrain._finish_round(4)
        assert "cotrain/new_recall@1" in metrics and cotrain.counts["cotrain/swaps"] == 1
        assert cotrain.retriever.version == spec.version
        assert cotrain.pending is None and (Path(spec.out) / "encoder.json").is_file()
    finally:
        cotrain.retriever.swap(None)


def test_a_version_whose_round_harvested_no_pairs_is_not_swapped_in(tmp_path: Path) -> None:
    """Its round trained nothing (no harvested pairs): it was swapped in and counted as a swap all the same."""
    cotrain = CoTraining(
        CotrainConfig(enable=True, background=False), tmp_path, tiny_rows("train"), tiny_rows("test"), None
    )
    matrix = load_query_encoder(weak_encoder(tmp_path / "base", seed=3)).matrix
    meta = {
        "step": 2,
        "new_recall@1": 0.5,
        "serving_recall@1": 0.5,
        "num_harvested_pairs": 0,
        "num_documents_moved": 0,
    }
    folder = str(save_query_encoder(QueryEncoder("idle", matrix, meta), tmp_path / "idle"))
    cotrain.guard_and_swap(2, folder)
    assert cotrain.retriever.version is None
    assert cotrain.counts["cotrain/swaps"] == 0 and cotrain.counts["cotrain/swaps_skipped"] == 1
    (record,) = [json.loads(line) for line in (tmp_path / "cotrain" / "swaps.jsonl").read_text().splitlines()]
    assert record["decision"] == "nothing_trained" and record["version"] == "idle"
