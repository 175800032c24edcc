"""MMhops reader: the Hugging Face dataset repository's parquet shards (read with pyarrow, a few rows at a time) and
the MMhops-KB corpora, by field name.

``--raw`` is the dataset repository as the hub client downloads it (``data/<split>-*.parquet`` for ``train``,
``validation``, ``test``), and ``--kb`` (default ``RAW/MMhops-KB``) the KB repository: ``image/image_corpus.jsonl``
(``{"id", "title", "entity_id", "image_path"}``; ``image_path`` relative to ``--kb-image-root``, default
``KB/image``) and ``text/text_corpus.jsonl`` (``{"id", "contents"}``, contents = ``"Title"\\ntext``).

Rows (``../shared/DATASETS.md`` section 3): ``id``, ``problem`` (with ``<image>`` placeholders, removed from the
question the policy reads), ``answer_eval``, ``split`` (Bridge | Compare, any case), ``problem_type``, and the
images: every column whose feature is an Image or a list of Images, in column order, or, in shards written
without Hugging Face's feature metadata, a ``{"bytes", "path"}`` struct or a list of them (how ``datasets`` stores
an Image); shards with no such column are refused (``ShardSchemaError``), never read as rows without images.
A gold entity per image is
read from the first of ``GOLD_COLUMNS`` present (the card names none, and the released shards carry none of
them); rows without one keep null golds. They are written, counted per split under the report's
``rows_without_gold``, train on the outcome and format terms only (no verification reward, no reachability
filter), and leave Table 4's MMhops Ident. and R@k n/a in ``ragym eval``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragym.data_prep.kb_records import Article, RowError, Sample, require_str
from ragym.data_prep.report import PrepReport, UnreadableFile, parquet_num_rows
from ragym.envs.files import read_jsonl
from ragym.rewards.mmhops import check_ground_truth

SPLITS = ("train", "validation", "test")
GOLD_COLUMNS = ("entity_ids", "gold_entities", "entity_id", "wikidata_ids", "wikidata_id")
_PLACEHOLDER = re.compile(r"<image>")
_TITLE = re.compile(r'^"?(.*?)"?\n', re.DOTALL)


IMAGE_STRUCT = frozenset({"bytes", "path"})
"""The fields ``datasets`` stores an Image as: a shard without feature metadata shows this struct instead."""


class ShardSchemaError(ValueError):
    """The dataset shards lack a column ragym needs (``ragym prep`` prints it as one line)."""


def _image_columns(features: Any, where: str) -> list[str]:
    """Columns holding images (an Image feature, or the bare ``{"bytes", "path"}`` struct), or a ShardSchemaError."""
    from datasets import Image, List  # since datasets 4, Sequence(...) builds a List

    def is_image(f: Any) -> bool:
        return isinstance(f, Image) or (isinstance(f, dict) and set(f) == IMAGE_STRUCT)

    columns = [
        name for name, f in features.items() if is_image(f) or (isinstance(f, List) and is_image(f.feature))
    ]
    if not columns:
        raise ShardSchemaError(
            f"{where}: no image column (an Image feature or a {{bytes, path}} struct) among {list(features)}"
        )
    return columns


def _cells(value: Any) -> list[dict[str, Any]]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, dict) and (v.get("bytes") or v.get("path"))]


def _gold(row: dict[str, Any], num_images: int, name: str) -> tuple[str | None, ...]:
    for column in GOLD_COLUMNS:
        if row.get(column) is not None:
            value = row[column]
            golds = [str(v) for v in (value if isinstance(value, list) else [value])]
            if len(golds) != num_images:
                raise RowError(
                    "gold_count_mismatch", f"{name}: {len(golds)} gold entities for {num_images} images"
                )
            return tuple(golds)
    return (None,) * num_images


def _spooled(data: bytes, spool: Path) -> str:
    """Write one query image's bytes under ``spool`` (named by content, extension by format); its path."""
    import hashlib
    import io

    from PIL import Image

    digest = hashlib.sha1(data).hexdigest()
    try:
        with Image.open(io.BytesIO(data)) as image:
            ext = (image.format or "png").lower().replace("jpeg", "jpg")
    except Exception:  # noqa: BLE001 - kb_build counts an image that does not decode as unreadable_image
        ext = "img"
    path = spool / digest[:2] / f"{digest}.{ext}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(path)


def _sample(
    row: dict[str, Any], split: str, image_columns: list[str], name: str, spool: Path | None = None
) -> Sample:
    sample_id = require_str(row, "id", name)
    problem = require_str(row, "problem", sample_id)
    kind = str(row.get("split", "")).capitalize()
    if kind not in ("Bridge", "Compare"):
        raise RowError("unknown_split_kind", f"{sample_id}: split {row.get('split')!r} is not Bridge/Compare")
    truth = {"answer_eval": row.get("answer_eval"), "question_type": row.get("problem_type")}
    try:
        answer_eval, qtype = check_ground_truth(truth)
    except ValueError as err:
        raise RowError("malformed_answer", f"{sample_id}: {err}") from err
    if qtype != "numerical" and not any(isinstance(a, str) and a.strip() for a in answer_eval):
        raise RowError("malformed_answer", f"{sample_id}: every answer_eval alias is empty: {answer_eval!r}")
    truth = {"answer_eval": answer_eval, "question_type": qtype.capitalize()}
    cells = [c for column in image_columns for c in _cells(row.get(column))]
    if not cells:
        raise RowError("missing_image", f"{sample_id} has no image")
    placeholders = len(_PLACEHOLDER.findall(problem))
    if placeholders and placeholders != len(cells):
        raise RowError("image_count_mismatch", f"{sample_id}: {placeholders} <image> for {len(cells)} images")
    images = tuple(c["bytes"] if c.get("bytes") else c["path"] for c in cells)
    if spool is not None:
        images = tuple(_spooled(i, spool) if isinstance(i, bytes) else i for i in images)
    question = " ".join(_PLACEHOLDER.sub(" ", problem).split())
    extra = {"kind": kind, "answer": row.get("answer")}
    return Sample(sample_id, split, question, images, _gold(row, len(cells), sample_id), truth, kind, extra)


def _shard_rows(shard: Path) -> Iterator[dict[str, Any]]:
    """The rows of one parquet shard, a few at a time (images stay the stored ``{"bytes", "path"}`` structs);
    ``UnreadableFile`` naming the shard when a page cannot be read."""
    import pyarrow.parquet as pq

    try:
        for batch in pq.ParquetFile(shard).iter_batches(batch_size=16):
            yield from batch.to_pylist()
    except (OSError, ValueError) as err:  # pyarrow's OSError or ArrowInvalid for a corrupt page
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UnreadableFile(f"{shard}: its rows cannot be read ({first})") from err


def _read_split(
    files: list[Path], split: str, report: PrepReport, limit: int | None, spool: Path | None = None
) -> list[Sample]:
    """The usable samples of one split's shards, read with pyarrow as they are converted (never the whole
    dataset in memory); the image columns come from each shard's Hugging Face feature metadata, or its bare
    ``{"bytes", "path"}`` structs."""
    import pyarrow.parquet as pq
    from datasets import Features

    report.read(split, 0)  # shards without rows: a split of no rows (written empty), not one never given
    # Every shard is opened first, so one that is not parquet is named before any row is read.
    files = [shard for shard in files if parquet_num_rows(shard)]
    where = f"MMhops {split} shards {[f.name for f in files]}"
    columns = {f: _image_columns(Features.from_arrow_schema(pq.read_schema(f)), where) for f in files}
    samples: list[Sample] = []
    count = 0
    for shard in files:
        for row in _shard_rows(shard):
            if limit is not None and count >= limit:
                return samples
            count += 1
            report.read(split)
            try:
                samples.append(_sample(row, split, columns[shard], f"{split} row {count}", spool))
            except RowError as err:
                report.reject(split, err.reason, str(err))
    return samples


def read_kb(
    kb: Path, report: PrepReport, image_root: Path | None = None
) -> tuple[list[Article], list[tuple[str, str]]]:
    """Entities from the image corpus (text = their text-corpus passages) and the passages of no entity."""
    root = image_root or kb / "image"
    texts: dict[str, list[str]] = {}
    for number, row in read_jsonl(kb / "text" / "text_corpus.jsonl", yield_broken=True):
        report.read("kb_text")
        contents = row.get("contents") if isinstance(row, dict) else None
        if not isinstance(contents, str) or not contents.strip():
            report.reject("kb_text", "kb_passage_without_contents", f"text_corpus.jsonl:{number}")
            continue
        match = _TITLE.match(contents)
        title, body = (match.group(1).strip(), contents[match.end() :]) if match else ("", contents)
        texts.setdefault(title, []).append(body)
        report.keep("kb_text")
    articles, seen = [], set()
    for number, row in read_jsonl(kb / "image" / "image_corpus.jsonl", yield_broken=True):
        report.read("kb")
        try:
            if not isinstance(row, dict):
                raise RowError("malformed_json", f"image_corpus.jsonl:{number}")
            title = require_str(row, "title", f"image_corpus.jsonl:{number}")
            key = str(row.get("entity_id") or row.get("id"))
            if key in seen:
                raise RowError("duplicate_kb_key", f"image_corpus.jsonl:{number}: {key}")
        except RowError as err:
            report.reject("kb", err.reason, str(err))
            continue
        seen.add(key)
        path = row.get("image_path")
        local = str(root / path) if isinstance(path, str) and path and (root / path).exists() else None
        articles.append(Article(key, title, "\n\n".join(texts.pop(title, [])), image_path=local))
        report.keep("kb")
    loose = [(title, body) for title, bodies in texts.items() for body in bodies]
    return articles, loose


def read(
    raw: Path,
    report: PrepReport,
    limit: int | None = None,
    kb: Path | None = None,
    kb_image_root: Path | None = None,
    spool: Path | None = None,
) -> tuple[list[Article], list[Sample], list[tuple[str, str]]]:
    """KB articles, the usable samples of every split found, and passages that belong to no KB entity. With
    ``spool``, each query image stored in the shards is written there as its row is read and the sample holds
    its path (the dataset's images are never all in memory); without, the sample holds the bytes."""
    kb_dir = kb or raw / "MMhops-KB"
    if not (kb_dir / "image" / "image_corpus.jsonl").exists():
        raise FileNotFoundError(f"no MMhops KB at {kb_dir} (image/image_corpus.jsonl); pass --kb")
    articles, loose = read_kb(kb_dir, report, kb_image_root)
    samples: list[Sample] = []
    for split in SPLITS:
        files = sorted((raw / "data").glob(f"{split}-*.parquet"))
        if files:
            samples += _read_split(files, split, report, limit, spool)
    if not report.num_in.keys() - {"kb", "kb_text"}:
        raise FileNotFoundError(f"no data/{{train,validation,test}}-*.parquet in {raw}")
    return articles, samples, loose
