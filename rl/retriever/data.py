"""Tables for MEMORA-R: training pairs as a ``datasets.Dataset``, held-out and BRIGHT-format evaluation sets.

Evaluation sets are TREC-style dicts: ``queries = {qid: text}``, ``corpus = {docid: text}`` and
``qrels = {qid: {docid: relevance}}``, plus ``excluded = {qid: docids}``, the documents BRIGHT removes from a query's
ranking before scoring (its ``examples`` rows' ``excluded_ids``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from datasets import Dataset

from ragym.envs.files import read_jsonl
from ragym.envs.retrieval.trec import read_trec_qrels
from ragym.rl.errors import UsageError
from ragym.rl.retriever.augment import ANCHOR_COLUMN, REASONING_COLUMN


class EvalSet(NamedTuple):
    """What an encoder is evaluated on."""

    queries: dict[str, str]
    corpus: dict[str, str]
    qrels: dict[str, dict[str, int]]
    excluded: dict[str, frozenset[str]]
    """Per query, the documents removed from its ranking before the cut-off (BRIGHT's ``excluded_ids``)."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a prepared jsonl file (a broken line raises naming the file and line)."""
    return [row for _, row in read_jsonl(path)]


def load_corpus(data_dir: Path) -> dict[str, str]:
    """docid -> answer text from a prepared folder's ``corpus.jsonl`` (a docid twice is an error: one of the two
    texts would be dropped, and a pair naming it trained on the other)."""
    path = data_dir / "corpus.jsonl"
    corpus, first_line = {}, {}
    for line, row in read_jsonl(path):
        docid, text = _pick(row, ("docid",), f"{path}:{line}"), _pick(row, ("text",), f"{path}:{line}")
        if docid in first_line:
            raise UsageError(f"{path}:{line}: docid {docid!r} again (first on line {first_line[docid]})")
        corpus[docid], first_line[docid] = text, line
    return corpus


def _check_pair(row: dict[str, Any], corpus: dict[str, str], negatives: list[str], where: str) -> None:
    """Refuse a pair the loss would train wrongly on: no question, or a document missing or its own negative."""
    if not str(row["question"]).strip():
        raise UsageError(f"{where}: empty question")
    for docid in (row["answer_id"], *negatives):
        if docid not in corpus:
            raise UsageError(f"{where}: document {docid!r} is not in corpus.jsonl")
    if row["answer_id"] in negatives:
        raise UsageError(f"{where}: its negative_ids name its own answer {row['answer_id']!r}")


def build_train_dataset(
    rows: list[dict[str, Any]],
    corpus: dict[str, str],
    num_hard_negatives: int,
    with_reasoning: bool,
    source: str = "train.jsonl",
) -> Dataset:
    """Columns ``anchor`` [, ``reasoning``], ``positive``, ``negative_1..n`` in the order the loss expects; a pair
    that cannot train (a field or document missing, an empty question, its answer among its negatives) is an error
    naming ``source`` and the pair."""
    needed = ["question_id", "question", "answer_id"]
    needed += ["negative_ids"] if num_hard_negatives else []
    needed += [REASONING_COLUMN] if with_reasoning else []
    table: dict[str, list[str]] = {ANCHOR_COLUMN: []}
    if with_reasoning:
        table[REASONING_COLUMN] = []
    table["positive"] = []
    for i in range(num_hard_negatives):
        table[f"negative_{i + 1}"] = []
    for number, row in enumerate(rows, 1):
        where = f"{source}: pair {row.get('question_id', f'#{number}')}"
        missing = [name for name in needed if name not in row]
        if missing:
            raise UsageError(f"{where}: no field {missing}")
        negatives = row["negative_ids"][:num_hard_negatives] if num_hard_negatives else []
        if len(negatives) < num_hard_negatives:
            raise UsageError(
                f"{where}: {len(negatives)} negatives mined, recipe asks for {num_hard_negatives}"
            )
        _check_pair(row, corpus, negatives, where)
        table[ANCHOR_COLUMN].append(row["question"])
        if with_reasoning:
            table[REASONING_COLUMN].append(row["reasoning"])
        table["positive"].append(corpus[row["answer_id"]])
        for i, docid in enumerate(negatives):
            table[f"negative_{i + 1}"].append(corpus[docid])
    return Dataset.from_dict(table)


def heldout_eval_set(data_dir: Path, split: str = "test") -> EvalSet:
    """The split's raw questions against the whole answer corpus; each question's own answer is relevant (a split
    with no pairs, a question twice, or an answer missing from the corpus is an error naming the file: each would
    otherwise fail after training or score a question silently)."""
    path = data_dir / f"{split}.jsonl"
    rows = read_rows(path)
    if not rows:
        raise UsageError(f"{path}: no held-out pairs to evaluate on")
    corpus = load_corpus(data_dir)
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for row in rows:
        qid = row["question_id"]
        if qid in queries:
            raise UsageError(f"{path}: question_id {qid!r} twice")
        if row["answer_id"] not in corpus:
            raise UsageError(f"{path}: pair {qid}: answer {row['answer_id']!r} is not in corpus.jsonl")
        queries[qid], qrels[qid] = row["question"], {row["answer_id"]: 1}
    return EvalSet(queries, corpus, qrels, {})


def _pick(row: dict[str, Any], names: tuple[str, ...], where: str) -> Any:
    for name in names:
        if name in row:
            return row[name]
    raise UsageError(f"{where}: none of the fields {list(names)} present")


def _excluded_ids(row: dict[str, Any], where: str) -> frozenset[str]:
    """A BRIGHT ``examples`` row's ``excluded_ids`` (``["N/A"]`` when there are none); none without the field."""
    ids = row.get("excluded_ids") or []
    if not isinstance(ids, list):
        raise UsageError(f"{where}: excluded_ids must be a list of document ids, got {ids!r:.60}")
    return frozenset(str(d) for d in ids if str(d) != "N/A")


def _gold_qrels(row: dict[str, Any], corpus: dict[str, str], corpus_path: Path, where: str) -> dict[str, int]:
    """A BRIGHT ``examples`` row's qrels as BRIGHT's run.py builds them: relevance 1 for each of its ``gold_ids``."""
    ids = row.get("gold_ids")
    if not isinstance(ids, list) or not ids:
        raise UsageError(
            f"{where}: no gold_ids to judge the query by (got {ids!r:.60}); give a QRELS file for such queries"
        )
    missing = [str(d) for d in ids if str(d) not in corpus]
    if missing:
        raise UsageError(f"{where}: gold id {missing[0]!r} is not in {corpus_path}")
    return {str(d): 1 for d in ids}


def load_bright(corpus_path: Path, queries_path: Path, qrels_path: Path | None = None) -> EvalSet:
    """A BRIGHT-format task: corpus and queries jsonl (``id``/``text`` style fields) plus TREC qrels; queries that
    are BRIGHT's ``examples`` rows bring their ``excluded_ids``, removed from the ranking as BRIGHT's run.py does
    (one that is also relevant in the qrels is an error naming the file, as run.py asserts). Without
    ``qrels_path`` the qrels are the rows' ``gold_ids`` at relevance 1, as run.py builds them (a row without gold
    ids, or with one the corpus lacks, is an error naming the file and row)."""
    corpus: dict[str, str] = {}
    for i, row in read_jsonl(corpus_path):
        where = f"{corpus_path}:{i}"
        docid = str(_pick(row, ("id", "_id", "docid"), where))
        if docid in corpus:  # the second row would replace the first's text unseen
            raise UsageError(f"{where}: document id {docid!r} is given twice")
        corpus[docid] = _pick(row, ("text", "contents", "content"), where)
    queries, excluded, gold = {}, {}, {}
    for i, row in read_jsonl(queries_path):
        where = f"{queries_path}:{i}"
        qid = str(_pick(row, ("id", "_id", "query_id", "qid"), where))
        if qid in queries:
            raise UsageError(f"{where}: query id {qid!r} is given twice")
        queries[qid], excluded[qid] = _pick(row, ("query", "text"), where), _excluded_ids(row, where)
        if not str(queries[qid]).strip():
            raise UsageError(f"{where}: query {qid!r} has no text")
        if qrels_path is None:
            gold[qid] = _gold_qrels(row, corpus, corpus_path, f"{where}: query {qid!r}")
    qrels = read_trec_qrels(qrels_path) if qrels_path is not None else gold
    if not any(rel > 0 for rels in qrels.values() for rel in rels.values()):
        raise UsageError(f"{qrels_path or queries_path}: no query with a relevant document")
    missing = sorted(set(qrels) - set(queries))
    if missing:
        raise UsageError(
            f"{qrels_path}: qrels name {len(missing)} queries absent from {queries_path}, e.g. {missing[:3]}"
        )
    for qid, rels in qrels.items():
        overlap = sorted(d for d, rel in rels.items() if rel > 0 and d in excluded[qid])
        if overlap:
            judged_in = qrels_path or "its gold_ids"
            raise UsageError(f"{queries_path}: query {qid!r} excludes {overlap[:3]}, relevant in {judged_in}")
    return EvalSet(queries, corpus, qrels, {qid: ids for qid, ids in excluded.items() if ids})
