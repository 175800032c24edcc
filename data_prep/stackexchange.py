"""Stack Exchange -> MEMORA-R contrastive training data (seed 000, sections 3.2 and 4.1).

Reads a data-dump ``Posts.xml`` or the Skeptics jsonl, pairs each question with its accepted or best answer,
drops contaminated threads (post ids in a benchmark corpus list, or posted after a cutoff), annotates each
question with a chain-of-thought intent, splits deterministically by thread id and mines BM25 hard negatives
inside each split. Writes ``train.jsonl``/``test.jsonl`` (pairs), ``corpus.jsonl`` (answers) and
``report.json`` (rows in = rows out + rows rejected, by reason, over the ``threads`` read).

    ragym prep stackexchange --input Posts.xml --out data/se --exclude-ids bench_ids.txt \\
        --cutoff 2024-01-01 --annotator offline --limit 1000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from xml.etree.ElementTree import ParseError

from ragym.data_prep.annotators import (
    OFFLINE_ANNOTATOR_NAME,
    Annotator,
    ChatAnnotator,
    OfflineAnnotator,
)
from ragym.data_prep.chat import ChatConfig, ChatError
from ragym.data_prep.hard_negatives import mine_bm25_negatives
from ragym.data_prep.report import PrepReport, row_limit
from ragym.data_prep.stackexchange_readers import INPUT_SUFFIXES, QAPair, Rejection, read_pairs

logger = logging.getLogger(__name__)
INPUT_ROWS = "threads"
"""The report's one split: input rows are threads (a question post of a dump, or a jsonl line)."""


@dataclass(frozen=True)
class PrepConfig:
    """Knobs of one Stack Exchange preparation run."""

    test_fraction: float = 0.2
    """Share of threads in the held-out split, chosen by a hash of the thread id (stable under --limit)."""
    num_negatives: int = 3
    """BM25 hard negatives per pair (0 disables mining)."""
    bm25_depth: int = 30
    """How far down each BM25 ranking to look for negatives."""
    cutoff: str | None = None
    """ISO date; threads whose question or answer was posted on or after it are dropped (section 4.1)."""
    reject_undated: bool = True
    """With a cutoff, drop threads without dates: they cannot be shown to predate it."""
    limit: int | None = None
    """Read only the first N input rows (questions, or jsonl lines)."""


def split_of(question_id: str, test_fraction: float) -> str:
    """``test`` or ``train``, from a hash of the thread id, so a thread's split never depends on the others."""
    bucket = int(hashlib.sha256(question_id.encode("utf-8")).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if bucket < test_fraction else "train"


def contamination_cause(pair: QAPair, excluded_ids: set[str], config: PrepConfig) -> str | None:
    """Why a thread must not be trained on (benchmark overlap or date), or None when it is clean."""
    if pair.question_id in excluded_ids or pair.answer_id in excluded_ids:
        return "contaminated_id"
    if config.cutoff is None:
        return None
    dates = [d for d in (pair.question_date, pair.answer_date) if d]
    if len(dates) < 2:
        return "undated" if config.reject_undated else None
    # ISO-8601 strings compare in date order, so no parsing is needed.
    return "after_cutoff" if max(dates)[: len(config.cutoff)] >= config.cutoff else None


def collect_pairs(
    path: Path, excluded_ids: set[str], config: PrepConfig, site: str | None = None
) -> tuple[list[QAPair], list[Rejection], int]:
    """Clean pairs, rejections and the number of input rows read (honouring ``limit``)."""
    pairs: list[QAPair] = []
    rejections: list[Rejection] = []
    seen: set[str] = set()
    num_in = 0
    for item in read_pairs(path, site):
        if config.limit is not None and num_in >= config.limit:
            break
        num_in += 1
        if isinstance(item, Rejection):
            rejections.append(item)
        elif item.question_id in seen:
            rejections.append(Rejection(f"{path}:{item.question_id}", "duplicate_question_id"))
        elif cause := contamination_cause(item, excluded_ids, config):
            rejections.append(Rejection(f"{path}:{item.question_id}", cause))
        else:
            seen.add(item.question_id)
            pairs.append(item)
    return pairs, rejections, num_in


def annotate_rows(pairs: list[QAPair], annotator: Annotator, test_fraction: float) -> list[dict]:
    """One output row per pair with its annotation, annotator label and split."""
    rows = []
    for pair in pairs:
        try:
            reasoning = annotator.annotate(pair.question)
        except ChatError as err:
            raise ChatError(f"question {pair.site}/{pair.question_id}: {err}") from err
        row = asdict(pair)
        row.update(
            reasoning=reasoning, annotator=annotator.name, split=split_of(pair.question_id, test_fraction)
        )
        rows.append(row)
    return rows


def add_negatives(rows: list[dict], config: PrepConfig) -> int:
    """Attach ``negative_ids`` to every row, mined within its split's answers; returns rows topped up."""
    num_topped_up = 0
    for split in ("train", "test"):
        part = [r for r in rows if r["split"] == split]
        negatives, topped = mine_bm25_negatives(
            queries=[r["question"] for r in part],
            query_threads=[r["question_id"] for r in part],
            doc_ids=[r["answer_id"] for r in part],
            doc_texts=[r["answer"] for r in part],
            doc_threads=[r["question_id"] for r in part],
            num_negatives=config.num_negatives,
            depth=config.bm25_depth,
        )
        num_topped_up += topped
        for row, ids in zip(part, negatives, strict=True):
            row["negative_ids"] = ids
    return num_topped_up


def prepare(
    input_path: Path,
    out_dir: Path,
    annotator: Annotator,
    config: PrepConfig,
    excluded_ids: set[str] | None = None,
) -> PrepReport:
    """Run the whole preparation and write its files; returns the report."""
    pairs, rejections, num_in = collect_pairs(input_path, excluded_ids or set(), config)
    rows = annotate_rows(pairs, annotator, config.test_fraction)
    num_topped_up = add_negatives(rows, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        with (out_dir / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for row in rows:
                if row["split"] == split:
                    f.write(json.dumps({k: v for k, v in row.items() if k != "answer"}) + "\n")
    with (out_dir / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            doc = {"docid": row["answer_id"], "text": row["answer"], "thread_id": row["question_id"]}
            f.write(json.dumps({**doc, "site": row["site"], "split": row["split"]}) + "\n")
    report = PrepReport("stackexchange")
    report.read(INPUT_ROWS, num_in)
    report.keep(INPUT_ROWS, len(rows))
    for rejection in rejections:
        report.reject(INPUT_ROWS, rejection.reason, rejection.row)
    reasons = Counter(r.reason for r in rejections)
    report.details.update(
        {
            "input": str(input_path),
            "contamination": {c: reasons.get(c, 0) for c in ("contaminated_id", "after_cutoff", "undated")},
            "splits": dict(Counter(r["split"] for r in rows)),
            "annotator": annotator.name,
            "offline_annotations": annotator.name == OFFLINE_ANNOTATOR_NAME,
            "num_rows_negatives_topped_up": num_topped_up,
            "config": asdict(config),
        }
    )
    report.save(out_dir)
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragym prep stackexchange", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--input", type=Path, required=True, help="Posts.xml or Skeptics-format .jsonl")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--exclude-ids", type=Path, help="benchmark corpus post ids, one per line")
    parser.add_argument("--cutoff", help="ISO date; drop threads posted on or after it")
    parser.add_argument(
        "--keep-undated", action="store_true", help="with --cutoff, keep threads without dates"
    )
    parser.add_argument("--annotator", choices=["offline", "chat"], default="offline")
    parser.add_argument("--chat-base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--chat-model", default="gpt-4o")
    parser.add_argument(
        "--chat-cache", type=Path, help="annotation cache (default OUT/annotations_cache.jsonl)"
    )
    parser.add_argument("--num-negatives", type=int, default=PrepConfig.num_negatives)
    parser.add_argument("--test-fraction", type=float, default=PrepConfig.test_fraction)
    parser.add_argument("--limit", type=row_limit)
    return parser


def main(argv: list[str]) -> int:
    """Command-line entry: prepare one Stack Exchange source and print the report; an input of a file type it
    cannot read, or a Posts.xml that is not well-formed, is one line and exit status 2."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.input.suffix not in INPUT_SUFFIXES:
        print(
            f"{parser.prog}: --input {args.input} is neither a Posts.xml nor a .jsonl file", file=sys.stderr
        )
        return 2
    config = PrepConfig(
        test_fraction=args.test_fraction,
        num_negatives=args.num_negatives,
        cutoff=args.cutoff,
        reject_undated=not args.keep_undated,
        limit=args.limit,
    )
    excluded = set()
    if args.exclude_ids:
        excluded = {line.strip() for line in args.exclude_ids.read_text().splitlines() if line.strip()}
    annotator: Annotator = OfflineAnnotator()
    if args.annotator == "chat":
        cache = args.chat_cache or args.out / "annotations_cache.jsonl"
        key = os.environ.get("OPENAI_API_KEY")  # unset for a local server
        annotator = ChatAnnotator(ChatConfig(args.chat_base_url, args.chat_model, key, cache, max_retries=5))
    try:
        report = prepare(args.input, args.out, annotator, config, excluded)
    except ParseError as err:  # a dump cut short or not XML: nothing is read from it (or written)
        print(f"{parser.prog}: {args.input} is not well-formed XML ({err})", file=sys.stderr)
        return 2
    print(report.format())
    return 0
