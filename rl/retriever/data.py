"""Tables for MEMORA-R: training pairs as a ``datasets.Dataset``, held-out and BRIGHT-format evaluation sets.

Evaluation sets are TREC-style dicts: ``queries = {qid: text}``, ``corpus = {docid: text}`` and
``qrels = {qid: {docid: relevance}}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datasets import Dataset

from ragym.envs.files import read_jsonl
from ragym.envs.retrieval.trec import read_trec_qrels
from ragym.rl.retriever.augment import ANCHOR_COLUMN, REASONING_COLUMN

EvalSet = tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]
"""(queries, corpus, qrels)."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a prepared jsonl file (a broken line raises naming the file and line)."""
    return [row for _, row in read_jsonl(path)]


def load_corpus(data_dir: Path) -> dict[str, str]:
    """docid -> answer text from a prepared folder's ``corpus.jsonl``."""
    return {row["docid"]: row["text"] for row in read_rows(data_dir / "corpus.jsonl")}


def build_train_dataset(
    rows: list[dict[str, Any]], corpus: dict[str, str], num_hard_negatives: int, with_reasoning: bool
) -> Dataset:
    """Columns ``anchor`` [, ``reasoning``], ``positive``, ``negative_1..n`` in the order the loss expects."""
    table: dict[str, list[str]] = {ANCHOR_COLUMN: []}
    if with_reasoning:
        table[REASONING_COLUMN] = []
    table["positive"] = []
    for i in range(num_hard_negatives):
        table[f"negative_{i + 1}"] = []
    for row in rows:
        negatives = row["negative_ids"][:num_hard_negatives]
        if len(negatives) < num_hard_negatives:
            raise ValueError(
                f"pair {row['question_id']}: {len(negatives)} negatives mined, recipe asks for {num_hard_negatives}"
            )
        table[ANCHOR_COLUMN].append(row["question"])
        if with_reasoning:
            table[REASONING_COLUMN].append(row["reasoning"])
        table["positive"].append(corpus[row["answer_id"]])
        for i, docid in enumerate(negatives):
            table[f"negative_{i + 1}"].append(corpus[docid])
    return Dataset.from_dict(table)


def heldout_eval_set(data_dir: Path, split: str = "test") -> EvalSet:
    """The split's raw questions against the whole answer corpus; each question's own answer is relevant."""
    rows = read_rows(data_dir / f"{split}.jsonl")
    queries = {row["question_id"]: row["question"] for row in rows}
    qrels = {row["question_id"]: {row["answer_id"]: 1} for row in rows}
    return queries, load_corpus(data_dir), qrels


def _pick(row: dict[str, Any], names: tuple[str, ...], where: str) -> Any:
    for name in names:
        if name in row:
            return row[name]
    raise ValueError(f"{where}: none of the fields {list(names)} present")


def load_bright(corpus_path: Path, queries_path: Path, qrels_path: Path) -> EvalSet:
    """A BRIGHT-format task: corpus and queries jsonl (``id``/``text`` style fields) plus TREC qrels."""
    corpus = {}
    for i, row in read_jsonl(corpus_path):
        where = f"{corpus_path}:{i}"
        corpus[str(_pick(row, ("id", "_id", "docid"), where))] = _pick(
            row, ("text", "contents", "content"), where
        )
    queries = {}
    for i, row in read_jsonl(queries_path):
        where = f"{queries_path}:{i}"
        queries[str(_pick(row, ("id", "_id", "query_id", "qid"), where))] = _pick(
            row, ("query", "text"), where
        )
    qrels = read_trec_qrels(qrels_path)
    missing = sorted(set(qrels) - set(queries))
    if missing:
        raise ValueError(
            f"{qrels_path}: qrels name {len(missing)} queries absent from {queries_path}, e.g. {missing[:3]}"
        )
    return queries, corpus, qrels
