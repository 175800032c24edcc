"""Smoke runs of the real entry points: ``ragym train-retriever`` and ``ragym retriever-demo`` on tiny data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ragym.rl.errors import UsageError
from ragym.rl.retriever import cli as retriever_train
from ragym.rl.retriever import demo as retriever_demo
from ragym.rl.retriever.args import parse_train_retriever_args
from ragym.rl.retriever.export import load_dense_retriever
from tests.rl.retriever_fixtures import prepared_dir, write_pairs_jsonl

TINY = {
    "model": {"max_seq_length": 32},
    "data": {"num_hard_negatives": 1},
    "train": {"batch_size": 4, "show_progress": False, "logging_steps": 1},
}


def _recipe(tmp_path: Path, **sections: dict) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(
        yaml.safe_dump(
            {name: {**TINY.get(name, {}), **sections.get(name, {})} for name in {*TINY, *sections}}
        )
    )
    return path


def test_train_retriever_trains_evaluates_and_exports(tmp_path: Path) -> None:
    data_dir = prepared_dir(tmp_path)
    recipe = _recipe(tmp_path, data={"data_dir": str(data_dir)}, train={"output_dir": str(tmp_path / "run")})
    assert retriever_train.main(["--recipe", str(recipe), "train.max_steps=1"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["heldout"]["num_queries"] == 6 and 0.0 <= metrics["heldout"]["ndcg@10"] <= 1.0
    hits = load_dense_retriever(metrics["export_dir"]).search(
        "Is the Great Wall of China visible from space?", 2
    )
    assert [h.docid for h in hits][:1] == ["506"]  # that question's own answer


def test_an_empty_held_out_split_is_refused_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = prepared_dir(tmp_path)
    (data_dir / "test.jsonl").write_text("")  # was a numpy error after the whole training run
    recipe = _recipe(tmp_path, data={"data_dir": str(data_dir)}, train={"output_dir": str(tmp_path / "run")})

    def train_retriever(_recipe):
        raise AssertionError("trained before the evaluation split was read")

    monkeypatch.setattr(retriever_train, "train_retriever", train_retriever)
    with pytest.raises(UsageError, match=r"test.jsonl: no held-out pairs to evaluate on"):
        retriever_train.main(["--recipe", str(recipe)])


def test_retriever_demo_writes_before_after_and_table(tmp_path: Path) -> None:
    pairs = write_pairs_jsonl(tmp_path / "pairs.jsonl")
    recipe = _recipe(tmp_path)
    out = tmp_path / "demo"
    argv = ["--out", str(out), "--input", str(pairs), "--recipe", str(recipe), "--max-steps", "1"]
    assert retriever_demo.main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    rows = {r["row"]: r["ndcg@10"] for r in metrics["ablation"]}
    assert (
        metrics["before"] == rows["zero-shot"] and metrics["after"] == rows["+ reasoning-trace augmentation"]
    )
    assert metrics["offline_annotations"] is True and metrics["data"]["num_rows_in"] == 16
    assert metrics["table"].splitlines()[0].startswith("| Training configuration | ndcg@10")


def test_demo_names_a_missing_input(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        retriever_demo.main(["--out", str(tmp_path), "--input", str(tmp_path / "nowhere.jsonl")])


def test_bright_takes_its_qrels_file_or_none_and_leaves_the_overrides_after_it() -> None:
    """``--bright CORPUS QUERIES [QRELS]``: without QRELS the queries' gold ids judge them (``load_bright``); a
    ``section.key=value`` item after the files is an override, not the qrels file."""
    argv = ["--recipe", "r", "--bright", "docs.jsonl", "examples.jsonl"]
    args = parse_train_retriever_args([*argv, "train.max_steps=1"])
    assert args.bright == ["docs.jsonl", "examples.jsonl"] and args.overrides == ["train.max_steps=1"]
    args = parse_train_retriever_args([*argv, "qrels.tsv", "train.max_steps=1"])
    assert args.bright == [*argv[3:], "qrels.tsv"] and args.overrides == ["train.max_steps=1"]
    with pytest.raises(SystemExit):
        parse_train_retriever_args(argv[:-1])  # a corpus alone
