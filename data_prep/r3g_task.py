"""Writes an R3G task folder (``ragym.envs.r3g.corpus`` layout): corpus images and features, query features, rows.

Shared by ``ragym.data_prep.mragbench`` and ``ragym.data_prep.r3g_synthetic`` so both produce the same schema.
Splits: a row is ``test`` when the first 8 hex digits of sha1(question id) / 16**8 < ``test_fraction``,
so the split of a question never depends on ``--limit``, row order or the other questions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ragym.data_prep.encoding import EncodeConfig, Item, encode_to_array
from ragym.data_prep.encoding.encoders import EnvEncoderItems
from ragym.data_prep.rows import verl_row
from ragym.envs.retrieval.encoders import ImageEncoder
from ragym.envs.retrieval.retrievers import normalise

ENV_ID = "R3G-v0"


@dataclass(frozen=True)
class TaskRow:
    """One question of an R3G task, before it becomes a verl row."""

    question_id: str
    question: str
    options: dict[str, str] | None
    """Letter -> option text (None for open questions)."""
    answer_choice: str | None
    """The correct letter (None for open questions)."""
    answer: str
    """Text of the correct answer."""
    query_image: str
    """Path relative to the task folder."""
    gold_images: list[str]
    """Corpus ids of the ground-truth evidence images."""
    scenario: str
    retrieved_images: list[str] | None = None
    """Corpus ids of the benchmark's own retrieved images, in its order (MRAG's evidence); None where the
    source has none (the synthetic task)."""


def split_of(question_id: str, test_fraction: float) -> str:
    """``test`` or ``train``, from a hash of the question id alone (stable under --limit and reordering).

    >>> split_of("17", 0.0), split_of("17", 1.0)
    ('train', 'test')
    """
    digest = int(hashlib.sha1(question_id.encode()).hexdigest()[:8], 16)
    return "test" if digest / 16**8 < test_fraction else "train"


def _encoding(batch: int, num: int) -> EncodeConfig:
    """The shared encoding step's layout for R3G images (a progress bar only for big corpora)."""
    return EncodeConfig(shard_size=16 * batch, batch_size=batch, progress=num > 16 * batch)


def write_corpus(
    out: Path,
    ids: list[str],
    paths: list[str],
    captions: list[str],
    encoder: ImageEncoder,
    encoder_spec: dict[str, Any],
    batch: int = 256,
) -> None:
    """``corpus/``: the table, the unit features (encoded in batches) and the manifest."""
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"image_id": ids, "path": paths, "caption": captions}).to_parquet(
        out / "corpus" / "corpus.parquet"
    )
    items = [Item(i, c, str(out / p)) for i, p, c in zip(ids, paths, captions, strict=True)]
    # No image at all (every question rejected): an empty corpus, so the report and empty rows are still written.
    vectors = (
        encode_to_array(items, EnvEncoderItems(encoder, "entities"), config=_encoding(batch, len(items)))
        if items
        else np.zeros((0, 1), np.float32)
    )
    np.save(out / "corpus" / "embeddings.npy", normalise(vectors))
    manifest = {"image_encoder": encoder_spec, "num_images": len(ids)}
    (out / "corpus" / "manifest.json").write_text(json.dumps(manifest, indent=1))


def write_queries(out: Path, paths: list[str], encoder: ImageEncoder) -> None:
    """``queries/``: the query-image paths and their unit features."""
    (out / "queries").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"path": paths}).to_parquet(out / "queries" / "queries.parquet")
    items = [Item(f"q{i}", None, str(out / p)) for i, p in enumerate(paths)]
    config = _encoding(256, len(items))
    vectors = (
        encode_to_array(items, EnvEncoderItems(encoder, "queries"), config=config)
        if paths
        else np.zeros((0, 1), np.float32)
    )
    np.save(out / "queries" / "embeddings.npy", normalise(vectors))


def task_row(
    row: TaskRow, index: int, split: str, data_source: str, env_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The verl parquet row of one question (ground truth as a JSON string, env options inside)."""
    options = {
        "question": row.question,
        "options": row.options,
        "query_image": row.query_image,
        "gold_images": row.gold_images,
        "scenario": row.scenario,
        "question_id": row.question_id,
    }
    if row.retrieved_images is not None:
        options["retrieved_images"] = row.retrieved_images
    truth = {
        "answer_choice": row.answer_choice,
        "answer": row.answer,
        "options": row.options,
        "gold_images": row.gold_images,
        "scenario": row.scenario,
    }
    return verl_row(
        data_source=data_source,
        ability="r3g",
        question=row.question,
        ground_truth=truth,
        index=index,
        split=split,
        env_id=ENV_ID,
        env_kwargs=env_kwargs,
        env_options=options,
        scenario=row.scenario,
        question_id=row.question_id,
    )


def write_rows(
    out: Path,
    rows: list[TaskRow],
    data_source: str,
    test_fraction: float,
    env_kwargs: dict[str, Any] | None = None,
    task_dir: Path | None = None,
) -> dict[str, int]:
    """``data/train.parquet`` and ``data/test.parquet`` (rows name ``task_dir``, default ``out``); returns
    the row count of each split."""
    (out / "data").mkdir(parents=True, exist_ok=True)
    kwargs = {"task_dir": str((task_dir or out).resolve()), **(env_kwargs or {})}
    records = {"train": [], "test": []}
    for index, row in enumerate(rows):
        split = split_of(row.question_id, test_fraction)
        records[split].append(task_row(row, index, split, data_source, kwargs))
    for split, recs in records.items():
        pd.DataFrame.from_records(
            recs, columns=["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
        ).to_parquet(out / "data" / f"{split}.parquet")
    return {split: len(recs) for split, recs in records.items()}
