"""MRAG-Bench -> an R3G task folder: image corpus with features, query images, train/test rows.

``ragym prep mragbench --raw DIR --out DIR [--limit N] [--corpus CORPUS_DIR] [--test-fraction F]``

``--raw`` is the dataset as a Hugging Face hub download lays it out (``DIR/data/test-*.parquet``); it is
read with pyarrow from disk, a few rows at a time. Each question becomes one row (data source ``mragbench``):
options A-D, ``answer_choice``, ``scenario``, the query image, as gold evidence its ``gt_images``, and as
``retrieved_images`` the benchmark's own CLIP top-5 in its order (the MRAG baseline's evidence; for
``Incomplete`` only the first, as MRAG-Bench's own loader keeps).
The corpus is every distinct image (content hash) among the ``gt_images`` and ``retrieved_images`` of the
rows kept, plus the files of ``--corpus`` (the separately distributed ``image_corpus`` folder), so a
ground-truth image that is also a corpus file is one corpus entry. Captions are empty (MRAG-Bench has none).
Splits: ``test`` when sha1(question id) falls under ``--test-fraction`` (``ragym.data_prep.r3g_task.split_of``).
``OUT/report.json``: rows in = rows out + rows rejected, by reason, for the ``questions`` and the ``--corpus``
files (``corpus_files``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from ragym.data_prep.r3g_task import TaskRow, write_corpus, write_queries, write_rows
from ragym.data_prep.report import PrepReport, UnreadableFile, parquet_num_rows, row_limit
from ragym.envs.image_budget import MAX_ASPECT_RATIO
from ragym.envs.retrieval.encoders import make_image_encoder

log = logging.getLogger(__name__)
DATA_SOURCE = "mragbench"
LETTERS = ("A", "B", "C", "D")
TEXT_FIELDS = ("id", "question", "answer", "scenario", *LETTERS)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif")
FIRST_IMAGE_ONLY = ("Incomplete",)
"""Scenarios whose retrieved list MRAG-Bench's loader cuts to its first image (eval/utils/dataloader.py)."""


class RowError(ValueError):
    """A question that cannot become a row; ``reason`` is the report's key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass
class _Images:
    """Distinct images written so far, by content hash."""

    out: Path
    ids: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    known: set[str] = field(default_factory=set)

    def add(self, data: bytes, folder: str) -> str:
        """Write ``data`` once under ``folder``; returns its id (``img_`` + sha1 prefix)."""
        image_id = "img_" + hashlib.sha1(data).hexdigest()[:16]
        if folder == "corpus/images" and image_id in self.known:
            return image_id
        with Image.open(io.BytesIO(data)) as image:
            ext = (image.format or "png").lower().replace("jpeg", "jpg")
        rel = f"{folder}/{image_id}.{ext}"
        (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
        (self.out / rel).write_bytes(data)
        if folder == "corpus/images":
            self.known.add(image_id)
            self.ids.append(image_id)
            self.paths.append(rel)
        return image_id if folder == "corpus/images" else rel


def _image_bytes(cell: Any, what: str) -> bytes:
    """The bytes of one parquet image cell (``{"bytes", "path"}``), checked to decode and to be within the aspect
    ratio Qwen-VL accepts (R3G's env refuses such an image in every episode that shows it)."""
    data = cell.get("bytes") if isinstance(cell, dict) else None
    if data is None and isinstance(cell, dict) and cell.get("path") and Path(cell["path"]).is_file():
        data = Path(cell["path"]).read_bytes()
    if not data:
        raise RowError(f"bad_{what}", "no image bytes")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.convert("RGB").load()
            width, height = image.size
    except Exception as err:  # PIL raises many types for corrupt files
        raise RowError(f"bad_{what}", f"undecodable image: {err}") from err
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise RowError(
            f"{what}_aspect_ratio",
            f"a {width}x{height} image: a side over {MAX_ASPECT_RATIO} times the other",
        )
    return data


def _check_row(record: dict[str, Any]) -> None:
    missing = [f for f in TEXT_FIELDS if not isinstance(record.get(f), str) or not record[f].strip()]
    if missing:
        raise RowError("missing_field", f"empty or missing {missing}")
    if str(record.get("answer_choice", "")).strip().upper() not in LETTERS:
        raise RowError("bad_answer_choice", f"answer_choice {record.get('answer_choice')!r} is not A-D")
    if not record.get("gt_images"):
        raise RowError("no_gt_images", "the question has no ground-truth image")


def _convert(record: dict[str, Any], images: _Images) -> TaskRow:
    """One dataset record as a task row; its images are written only when the whole record is valid."""
    _check_row(record)
    query = _image_bytes(record["image"], "query_image")
    gold = [_image_bytes(c, "gt_image") for c in record["gt_images"]]
    retrieved = [_image_bytes(c, "retrieved_image") for c in record.get("retrieved_images") or []]
    gold_ids = [images.add(data, "corpus/images") for data in gold]
    retrieved_ids = [images.add(data, "corpus/images") for data in retrieved]
    scenario = record["scenario"].strip()
    return TaskRow(
        question_id=record["id"].strip(),
        question=record["question"].strip(),
        options={letter: record[letter].strip() for letter in LETTERS},
        answer_choice=record["answer_choice"].strip().upper(),
        answer=record["answer"].strip(),
        query_image=images.add(query, "queries"),
        gold_images=list(dict.fromkeys(gold_ids)),
        scenario=scenario,
        retrieved_images=retrieved_ids[:1] if scenario in FIRST_IMAGE_ONLY else retrieved_ids,
    )


def read_records(raw: Path, limit: int | None) -> Iterator[dict[str, Any]]:
    """The ``test`` split of the hub-layout folder ``raw``, images undecoded (``{"bytes", "path"}``, as the
    parquet stores them), read with pyarrow a few rows at a time as iterated: the dataset's 16,130 images are
    never all in memory, nor copied into a cache. Every shard is opened first, so one that is not parquet is
    named before any row is read; a shard whose pages cannot be read is ``UnreadableFile`` naming it."""
    import pyarrow.parquet as pq

    shards = sorted(raw.glob("data/test-*.parquet"))
    if not shards:
        raise FileNotFoundError(f"{raw} has no data/test-*.parquet (the hub layout of uclanlp/MRAG-Bench)")
    shards = [shard for shard in shards if parquet_num_rows(shard)]  # a shard without rows adds none
    count = 0
    for shard in shards:
        try:
            for batch in pq.ParquetFile(shard).iter_batches(batch_size=8):
                for row in batch.to_pylist():
                    if limit is not None and count >= limit:
                        return
                    count += 1
                    yield row
        except (OSError, ValueError) as err:  # pyarrow's OSError or ArrowInvalid for a corrupt page
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UnreadableFile(f"{shard}: its rows cannot be read ({first})") from err


def _corpus_files(corpus: Path | None) -> list[Path]:
    if corpus is None:
        return []
    if not corpus.is_dir():
        raise FileNotFoundError(f"--corpus {corpus} is not a folder")
    return sorted(p for p in corpus.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)


def prepare(
    raw: Path,
    out: Path,
    limit: int | None = None,
    corpus: Path | None = None,
    test_fraction: float = 0.3,
    encoder: dict[str, Any] | None = None,
) -> PrepReport:
    """Write the task folder ``out``; returns the report (also ``out/report.json``)."""
    encoder_spec = encoder or {"name": "pixel", "kwargs": {}}
    out.mkdir(parents=True, exist_ok=True)
    images = _Images(out)
    report = PrepReport(DATA_SOURCE)
    rows, seen = [], set()
    report.read("questions", 0)  # an empty split still reports its 0 = 0 + 0
    for index, record in enumerate(read_records(raw, limit)):
        report.read("questions")
        try:
            if str(record.get("id")).strip() in seen:  # kept ids are stripped: " 3" repeats "3"
                raise RowError("duplicate_id", f"id {record.get('id')!r} appeared before")
            rows.append(_convert(record, images))
            seen.add(rows[-1].question_id)
            report.keep("questions")
        except RowError as err:
            report.reject("questions", err.reason, f"row {index} (id {record.get('id')!r}): {err.detail}")
    for path in _corpus_files(corpus):
        report.read("corpus_files")
        try:
            images.add(_image_bytes({"bytes": path.read_bytes()}, "corpus_file"), "corpus/images")
            report.keep("corpus_files")
        except RowError as err:
            report.reject("corpus_files", err.reason, f"{path}: {err.detail}")
    encoder_obj = make_image_encoder(encoder_spec)
    write_corpus(out, images.ids, images.paths, [""] * len(images.ids), encoder_obj, encoder_spec)
    write_queries(out, [r.query_image for r in rows], encoder_obj)
    report.details.update(
        {
            "splits": write_rows(out, rows, DATA_SOURCE, test_fraction),
            "test_fraction": test_fraction,
            "num_corpus_images": len(images.ids),
            "image_encoder": encoder_spec,
            "scenarios": dict(sorted(Counter(r.scenario for r in rows).items())),
            "num_rows_without_retrieved": sum(not r.retrieved_images for r in rows),
        }
    )
    report.save(out)
    return report


def main(argv: list[str]) -> int:
    """``ragym prep mragbench --raw DIR --out DIR [--limit N]``."""
    parser = argparse.ArgumentParser(
        prog="ragym prep mragbench", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--raw", required=True, type=Path, help="hub-layout folder with data/test-*.parquet")
    parser.add_argument("--out", required=True, type=Path, help="task folder to write")
    parser.add_argument("--limit", type=row_limit, help="only the first N questions")
    parser.add_argument("--corpus", type=Path, help="the image_corpus folder of the separate corpus zip")
    parser.add_argument(
        "--test-fraction", type=float, default=0.3, help="share of questions in the test split"
    )
    parser.add_argument("--encoder", default="pixel", choices=("pixel", "eva_clip"))
    parser.add_argument("--model-path", help="EVA-CLIP weights folder (with --encoder eva_clip)")
    parser.add_argument("--processor-path", help="EVA-CLIP processor folder (with --encoder eva_clip)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    spec: dict[str, Any] = {"name": args.encoder, "kwargs": {}}
    if args.encoder == "eva_clip":
        if not (args.model_path and args.processor_path):
            parser.error("--encoder eva_clip needs --model-path and --processor-path")
        spec["kwargs"] = {
            "model_path": args.model_path,
            "processor_path": args.processor_path,
            "device": args.device,
        }
    report = prepare(args.raw, args.out, args.limit, args.corpus, args.test_fraction, spec)
    print(report.format())
    return 0
