"""``ragym prep bright|mm-bright``: BRIGHT and MM-BRIGHT tasks into MEMORA-v0 rows, a corpus and a report.

    ragym prep bright --raw DIR --task biology --out OUT [--long] [--qrels FILE] [--limit N]
    ragym prep mm-bright --raw DIR --domain academia --task 2 --out OUT [--descriptions FILE] [--limit N]

``--raw`` is a local copy of the hub dataset (configs as folders: BRIGHT ``examples/``, ``documents/``,
``long_documents/``; MM-BRIGHT ``examples/``, ``examples_multimodal/``, ``examples_images/``,
``documents/``), each split as ``<split>*.parquet``, ``<split>.jsonl`` or ``<split>.json``. Qrels follow
BRIGHT's run.py: gold ids get relevance 1 (``gold_ids_long`` with ``--long``) and excluded ids
(BRIGHT ``excluded_ids`` without ``"N/A"``, MM-BRIGHT ``negative_ids``) are removed from rankings; ``--qrels``
reads a TREC qrels file instead (``qid 0 docid rel``, e.g. tevatron's ``bright_qrels``). MM-BRIGHT task 2
resolves the first query image through ``examples_images`` (written to ``OUT/images/``); ``--descriptions``
(JSON lines ``{"id", "description"}``) adds image descriptions for text-only policies; a line that cannot be used
is rejected (split ``descriptions``) and its query goes on without one.

Writes ``OUT/documents.jsonl``, ``OUT/data/warmup.parquet`` and ``OUT/data/test.parquet`` (verl rows for
``MEMORA-v0``) and ``OUT/report.json`` (``ragym.data_prep.report``): for the splits ``queries`` and ``documents``,
rows in = rows out + rows rejected, by reason; its details hold the warm-up/test split. The split is the paper's (section 5.3): the usable queries in chronological order, the
first ``--warmup-fraction`` (0.8) the warm-up pool whose episodes write the domain memory, the rest held out.
The rows carry no date, so the dataset's own row order stands for time (ragym's choice). ``--memory-dir DIR``
puts the episodic memory on disk, one file per prep task (``<DIR>/<task>.jsonl``, the task being the report's
dataset name, ``bright_biology``, ``bright_biology_long``, ``mm_bright_task2_academia``: two tasks never share
a memory, whose document ids and queries would not match), so it persists across the episodes of a run (the
agent loop builds an env per episode, and GRPO and ``ragym eval`` refuse MEMORA rows without a folder);
held-out rows always read the memory frozen (with or without a folder), and ``--freeze-memory`` freezes the
warm-up rows too.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from PIL import Image

from ragym.data_prep.report import PrepReport, UnreadableFile, row_limit
from ragym.data_prep.rows import verl_row
from ragym.envs.files import JsonlError, read_jsonl
from ragym.envs.image_budget import MAX_ASPECT_RATIO
from ragym.envs.retrieval.trec import read_trec_qrels

ENV_ID = "MEMORA-v0"


class RowError(ValueError):
    """A row that cannot be used; ``reason`` is the report's key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def read_split(raw: Path, config: str, split: str) -> list[Any]:
    """Rows of ``raw/config/split*`` (parquet shards, jsonl or json); a missing split is an error naming it, and
    so is a shard that is not parquet or a ``.json`` that is not a JSON list (``UnreadableFile``). A jsonl line that is
    not JSON is its ``JsonlError`` in the rows, for the caller to reject (``malformed_json``) and read on."""
    folder = raw / config
    shards = sorted(folder.glob(f"{split}-*.parquet")) + sorted(folder.glob(f"{split}.parquet"))
    if shards:
        return [row for shard in shards for row in _parquet_rows(shard)]
    for path in (folder / f"{split}.jsonl", folder / f"{split}.json"):
        if path.exists():
            if path.suffix == ".json":
                try:
                    rows = json.loads(path.read_text(encoding="utf-8-sig"))  # -sig: a BOM is skipped
                except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
                    raise UnreadableFile(f"{path} is not JSON ({err})") from err
                if not isinstance(rows, list):  # a number failed in list(); an object listed its keys as rows
                    raise UnreadableFile(f"{path} is not a JSON list of rows (found {type(rows).__name__})")
                return rows
            return [row for _, row in read_jsonl(path, yield_broken=True)]
    raise FileNotFoundError(f"no {split}*.parquet, {split}.jsonl or {split}.json in {folder}")


def _parquet_rows(shard: Path) -> list[dict[str, Any]]:
    try:
        return pd.read_parquet(shard).to_dict("records")
    except (pa.ArrowException, OSError) as err:  # not parquet (ArrowInvalid), or its data corrupt (OSError)
        raise UnreadableFile(f"{shard} is not a readable parquet file ({err})") from err


def _malformed(row: Any) -> str:
    """What is wrong with a split row that is not a JSON object: its jsonl line's error, or the value."""
    return str(row) if isinstance(row, JsonlError) else f"not a JSON object: {str(row)[:60]}"


def _ids(value: Any) -> list[str]:
    """A list-like of ids (list, numpy array, None) as strings, BRIGHT's ``"N/A"`` placeholder dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        raise RowError("bad_field", f"expected a list of ids, got the string {value[:40]!r}")
    return [str(v) for v in list(value) if str(v) != "N/A"]


def _null(value: Any) -> bool:
    """None or NaN: how a null id reads back from parquet (pandas turns a null in a string column into NaN)."""
    return value is None or (isinstance(value, float) and value != value)


def read_documents(rows: list[Any], report: PrepReport) -> dict[str, str]:
    """``{id: content}``; rows that are not JSON objects, without an id or text content, with only whitespace as
    content, or repeating an id, are rejected (split ``documents``)."""
    texts: dict[str, str] = {}
    for index, row in enumerate(rows):
        report.read("documents")
        docid, content = (row.get("id"), row.get("content")) if isinstance(row, dict) else (None, None)
        if not isinstance(row, dict):
            report.reject("documents", "malformed_json", f"document {index}: {_malformed(row)}")
        elif _null(docid) or not isinstance(content, str):
            report.reject("documents", "missing_field", f"document {index}: no id or text content")
        elif not content.strip():  # nothing to retrieve or to show as evidence
            report.reject("documents", "empty_document", f"document {index}: id {docid!r} has no text")
        elif str(docid) in texts:
            report.reject("documents", "duplicate_id", f"document {index}: id {docid!r} appeared before")
        else:
            texts[str(docid)] = content
            report.keep("documents")
    return texts


def query_options(
    row: Any,
    domain: str,
    gold_key: str,
    excluded_key: str,
    corpus: dict[str, str],
    qrels: dict | None,
) -> dict[str, Any]:
    """The env options of one example (``domain``: its prep task, the name of its memory file); raises
    ``RowError`` for unusable rows."""
    if not isinstance(row, dict):
        raise RowError("malformed_json", _malformed(row))
    if _null(row.get("id")) or not isinstance(row.get("query"), str):
        raise RowError(
            "missing_field", f"no id or no query text (id {row.get('id')!r}; fields {sorted(row)[:8]})"
        )
    qid, query = str(row["id"]), row["query"].strip()
    if not query:
        raise RowError("empty_query", qid)
    if qrels is not None:
        judged = {d: r for d, r in qrels.get(qid, {}).items() if r > 0}
    else:
        judged = {d: 1 for d in _ids(row.get(gold_key))}
    if not judged:
        raise RowError("no_gold", qid)
    missing = [d for d in judged if d not in corpus]
    if missing:
        raise RowError("gold_not_in_corpus", f"{qid}: {missing[:3]}")
    excluded = _ids(row.get(excluded_key))
    if set(excluded) & set(judged):
        raise RowError("excluded_overlaps_gold", qid)
    return {"query": query, "query_id": qid, "domain": domain, "qrels": judged, "excluded_ids": excluded}


SPLITS = ("warmup", "test")
SPLIT_ORDER = "dataset row order (the rows carry no date)"


def make_row(
    options: dict[str, Any], index: int, data_source: str, env_kwargs: dict[str, Any], split: str
) -> dict[str, Any]:
    """One verl row; the qrels go to the reward's ground truth and to the env (memory outcome, never shown)."""
    truth = {"qrels": options["qrels"], "excluded_ids": options["excluded_ids"]}
    env_kwargs = {**env_kwargs, "domain": options["domain"]}
    return verl_row(
        data_source=data_source,
        ability="reasoning_retrieval",
        question=options["query"],
        ground_truth=truth,
        index=index,
        split=split,
        env_id=ENV_ID,
        env_kwargs=env_kwargs,
        env_options=options,
    )


def write_task(
    args: argparse.Namespace, examples: list, corpus: dict[str, str], report: PrepReport, build
) -> PrepReport:
    """Write corpus, rows and report; ``build(row) -> options`` raises ``RowError`` for rejected rows."""
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    corpus_path = (out / "documents.jsonl").resolve()
    with corpus_path.open("w", encoding="utf-8") as f:
        for docid, content in corpus.items():
            f.write(json.dumps({"id": docid, "content": content}, ensure_ascii=False) + "\n")
    usable, seen = [], set()
    for index, example in enumerate(examples):
        report.read("queries")
        try:
            options = build(example)
            # A repeated query would be asked twice and write the memory twice (and could land in both parts).
            if options["query_id"] in seen:
                raise RowError("duplicate_id", f"query id {options['query_id']!r} appeared before")
            seen.add(options["query_id"])
            usable.append((index, options))
            report.keep("queries")
        except RowError as err:
            report.reject("queries", err.reason, f"example {index}: {err.detail}")
    num_warmup = int(args.warmup_fraction * len(usable))
    (out / "data").mkdir(exist_ok=True)
    columns = ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
    for split, part in zip(SPLITS, (usable[:num_warmup], usable[num_warmup:]), strict=True):
        env_kwargs = split_env_kwargs(args, corpus_path, split)
        rows = [make_row(options, index, report.dataset, env_kwargs, split) for index, options in part]
        pd.DataFrame(rows, columns=columns).to_parquet(out / "data" / f"{split}.parquet")
    ids = [options["query_id"] for _, options in usable]
    if args.memory_dir is not None and usable:
        report.details["memory_file"] = str(args.memory_dir.resolve() / f"{usable[0][1]['domain']}.jsonl")
    report.details["split"] = {
        "order": SPLIT_ORDER,
        "warmup_fraction": args.warmup_fraction,
        "num_warmup": num_warmup,
        "num_test": len(usable) - num_warmup,
        "warmup_query_ids": ids[:num_warmup],
        "test_query_ids": ids[num_warmup:],
    }
    report.save(out)
    return report


def split_env_kwargs(args: argparse.Namespace, corpus_path: Path, split: str) -> dict[str, Any]:
    """The env of a split's rows: the corpus, the memory folder, and the freeze (always for held-out rows, with
    or without a folder: a runner that shares one env across rows must not let them write it)."""
    env_kwargs: dict[str, Any] = {"corpus_path": str(corpus_path)}
    if args.memory_dir is not None:
        env_kwargs["memory_dir"] = str(args.memory_dir.resolve())
    return env_kwargs | {"memory_frozen": split == "test" or args.freeze_memory}


def warmup_fraction(text: str) -> float:
    """``--warmup-fraction``: a share in [0, 1]."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"the warm-up fraction must be in [0, 1], got {text}")
    return value


def prep_bright(args: argparse.Namespace) -> PrepReport:
    """One BRIGHT task (``examples`` + ``documents`` or ``long_documents``)."""
    report = PrepReport(f"bright_{args.task}")
    memory = f"{report.dataset}_long" if args.long else report.dataset  # long documents: other document ids
    corpus = read_documents(
        read_split(args.raw, "long_documents" if args.long else "documents", args.task), report
    )
    examples = read_split(args.raw, "examples", args.task)[: args.limit]
    try:
        qrels = read_trec_qrels(args.qrels) if args.qrels else None
    except ValueError as err:  # a line that is not a judgement: no query's gold can be trusted
        raise UnreadableFile(str(err)) from err
    gold_key = "gold_ids_long" if args.long else "gold_ids"

    def build(row: Any) -> dict[str, Any]:
        return query_options(row, memory, gold_key, "excluded_ids", corpus, qrels)

    return write_task(args, examples, corpus, report, build)


def _image_table(raw: Path, domain: str) -> dict[str, bytes]:
    """``examples_images``: path -> image bytes (top-level ``path``/``bytes`` or a nested ``image`` cell)."""
    table = {}
    for row in read_split(raw, "examples_images", domain):
        if not isinstance(row, dict):  # like a row without bytes: its query is rejected as missing_image
            continue
        image = row.get("image")
        cell = image if isinstance(image, dict) else row
        if cell.get("path") is not None and cell.get("bytes") is not None:
            table[str(cell["path"])] = bytes(cell["bytes"])
    return table


def _check_image(data: bytes, name: str) -> None:
    """Raise ``RowError`` unless ``data`` decodes (``unreadable_image``) within the aspect ratio Qwen-VL accepts
    (``image_aspect_ratio``): the env would fail on it at reset."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.convert("RGB").load()
            width, height = image.size
    except Exception as err:  # noqa: BLE001 - PIL raises many types for a corrupt file
        raise RowError("unreadable_image", f"{name}: {err}") from err
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise RowError(
            "image_aspect_ratio",
            f"{name}: a {width}x{height} image, a side over {MAX_ASPECT_RATIO} times the other",
        )


def read_descriptions(path: Path, report: PrepReport) -> dict[str, str]:
    """``--descriptions``: ``{query id: image description}``. A line that is not a JSON object, lacks an id or a
    text description, or repeats an id is rejected (split ``descriptions``); its query goes on without one, as a
    query no line names does (a description is an aid, not part of the query)."""
    descriptions: dict[str, str] = {}
    for number, row in read_jsonl(path, yield_broken=True):
        report.read("descriptions")
        where = f"{path.name}:{number}"
        qid, text = (row.get("id"), row.get("description")) if isinstance(row, dict) else (None, None)
        if isinstance(row, JsonlError):  # its message names the file and line
            report.reject("descriptions", "malformed_json", str(row))
        elif not isinstance(row, dict):
            report.reject("descriptions", "malformed_json", f"{where}: {_malformed(row)}")
        elif _null(qid) or not isinstance(text, str) or not text.strip():
            report.reject("descriptions", "missing_field", f"{where}: no id or no text description")
        elif str(qid) in descriptions:
            report.reject("descriptions", "duplicate_id", f"{where}: query id {qid!r} appeared before")
        else:
            descriptions[str(qid)] = text
            report.keep("descriptions")
    return descriptions


def prep_mm_bright(args: argparse.Namespace) -> PrepReport:
    """One MM-BRIGHT domain, Task 1 (text) or Task 2 (text + first query image)."""
    report = PrepReport(f"mm_bright_task{args.task}_{args.domain}")
    corpus = read_documents(read_split(args.raw, "documents", args.domain), report)
    config = "examples" if args.task == 1 else "examples_multimodal"
    examples = read_split(args.raw, config, args.domain)[: args.limit]
    images = _image_table(args.raw, args.domain) if args.task == 2 else {}
    descriptions = read_descriptions(args.descriptions, report) if args.descriptions else {}

    def build(row: Any) -> dict[str, Any]:
        options = query_options(row, report.dataset, "gold_ids", "negative_ids", corpus, None)
        if args.task == 2:
            paths = _ids(row.get("image_paths"))
            if not paths:
                raise RowError("no_query_image", options["query_id"])
            if paths[0] not in images:
                raise RowError("missing_image", f"{options['query_id']}: {paths[0]}")
            _check_image(images[paths[0]], f"{options['query_id']}: {paths[0]}")
            target = (args.out / "images" / paths[0]).resolve()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(images[paths[0]])
            options["image_path"] = str(target)
        if options["query_id"] in descriptions:
            options["image_description"] = descriptions[options["query_id"]]
        return options

    return write_task(args, examples, corpus, report, build)


def main(command: str, argv: list[str]) -> int:
    """``ragym prep bright ...`` or ``ragym prep mm-bright ...``; prints the report (an input file it cannot read
    raises ``UnreadableFile``, which ``ragym prep`` prints as one line naming it, exit status 2)."""
    parser = argparse.ArgumentParser(
        prog=f"ragym prep {command}", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument(
        "--raw", required=True, type=Path, help="local copy of the hub dataset (configs as folders)"
    )
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--limit", type=row_limit, help="only the first N examples")
    parser.add_argument(
        "--warmup-fraction",
        type=warmup_fraction,
        default=0.8,
        help="first share of the queries (in order) that warms the memory up; the rest is held out",
    )
    parser.add_argument(
        "--memory-dir", type=Path, help="episodic memory folder the warm-up rows' env writes (persists)"
    )
    parser.add_argument(
        "--freeze-memory", action="store_true", help="warm-up rows too read the memory without writing"
    )
    if command == "bright":
        parser.add_argument("--task", required=True, help="BRIGHT split, e.g. biology")
        parser.add_argument("--long", action="store_true", help="long_documents and gold_ids_long")
        parser.add_argument("--qrels", type=Path, help="TREC qrels file to use instead of gold_ids")
    else:
        parser.add_argument("--domain", required=True, help="MM-BRIGHT split, e.g. academia")
        parser.add_argument("--task", type=int, choices=(1, 2), default=2)
        parser.add_argument(
            "--descriptions", type=Path, help='JSON lines {"id", "description"} of query images'
        )
    args = parser.parse_args(argv)
    report = prep_bright(args) if command == "bright" else prep_mm_bright(args)
    print(report.format())
    return 0
