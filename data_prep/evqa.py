"""Encyclopedic-VQA reader: the official CSVs (by column name) and the E-VQA KB JSON.

``--raw`` holds (``../shared/DATASETS.md`` section 2): ``{train,val,test}.csv``, ``encyclopedic_kb_wiki.json``
(or ``--kb``), and the images: ``landmarks/`` (GLDv2 layout ``<id[0]>/<id[1]>/<id[2]>/<id>.jpg``) and
``inaturalist/`` with an ``id2name`` JSON (``id2name.json``, ``train_id2name.json`` or ``val_id2name.json``:
``{image_id: path relative to the iNat root}``); a flat ``<root>/<id>.jpg`` is accepted for either.

Each CSV row has up to five ``|``-joined image ids of the same entity: every (question, image) pair is one
sample, as the benchmark counts its test set (5,750 triplets); report counts are per pair. ``answer`` keeps its
``|`` alternatives and ``&&`` list items (the scorer reads them). A ``2_hop`` row names two URLs: the first is
the entity in the image (its gold), the second the article of the second hop (kept in ``extra.hop_urls``).
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

from ragym.data_prep.kb_files import read_kb_file
from ragym.data_prep.kb_records import Article, RowError, Sample, require_str
from ragym.data_prep.report import PrepReport, UnreadableFile
from ragym.rewards.answers import score_answer
from ragym.rewards.evqa import QUESTION_TYPES

SPLITS = ("train", "val", "test")
KB_NAME = "encyclopedic_kb_wiki.json"
REQUIRED_COLUMNS = (
    "question",
    "answer",
    "dataset_image_ids",
    "dataset_name",
    "question_type",
    "wikipedia_url",
)
_SURROGATE = re.compile("[\udc80-\udcff]")
"""What ``errors="surrogateescape"`` makes of a byte that is not UTF-8."""


class ImageFinder:
    """Resolves an E-VQA image id of ``landmarks`` or ``inaturalist`` to a local file."""

    def __init__(self, raw: Path, landmarks: Path | None = None, inaturalist: Path | None = None):
        self.landmarks = landmarks or raw / "landmarks"
        self.inat = inaturalist or raw / "inaturalist"
        self.inat_paths: dict[str, str] = {}
        for name in ("id2name.json", "train_id2name.json", "val_id2name.json"):
            for folder in (self.inat, raw):
                if (folder / name).exists():
                    self.inat_paths.update(_id2name(folder / name))

    def __call__(self, dataset: str, image_id: str) -> str | None:
        """The file of ``image_id`` in ``dataset``'s layout, or None."""
        if dataset == "landmarks":
            candidates = [self.landmarks / image_id[0] / image_id[1] / image_id[2] / f"{image_id}.jpg"]
            candidates.append(self.landmarks / f"{image_id}.jpg")
        elif dataset == "inaturalist":
            candidates = [self.inat / f"{image_id}.jpg"]
            if image_id in self.inat_paths:
                candidates.insert(0, self.inat / self.inat_paths[image_id])
        else:
            return None
        return next((str(p) for p in candidates if len(image_id) >= 3 and p.exists()), None)


def _id2name(path: Path) -> dict[str, str]:
    """An ``id2name`` file's ``{image_id: path}``; ``UnreadableFile`` naming it when it is cut short or not that."""
    try:
        mapping = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError as err:  # not JSON, or not UTF-8
        raise UnreadableFile(f"{path}: not JSON, e.g. cut short ({err})") from err
    if not isinstance(mapping, dict):
        raise UnreadableFile(f"{path}: not a JSON object of image id -> path")
    return {str(k): str(v) for k, v in mapping.items()}


def _ground_truth(row: dict[str, Any], name: str) -> tuple[dict[str, Any], str]:
    qtype = row.get("question_type", "")
    if qtype not in QUESTION_TYPES:
        raise RowError("unknown_question_type", f"{name}: question_type {qtype!r}")
    truth = {"answer": require_str(row, "answer", name), "question_type": qtype, "question": row["question"]}
    try:
        score_answer("evqa", "", truth)
    except ValueError as err:
        raise RowError("malformed_answer", f"{name}: {err}") from err
    return truth, qtype


def _samples(
    row: dict[str, Any], split: str, name: str, find_image: ImageFinder, report: PrepReport
) -> list[Sample]:
    """The (question, image) samples of one CSV row; each unusable image is one rejected pair."""
    ids = [i.strip() for i in (row.get("dataset_image_ids") or "").split("|") if i.strip()]
    report.read(split, max(1, len(ids)))
    try:
        if any(_SURROGATE.search(v) for v in row.values() if isinstance(v, str)):
            raise RowError("not_utf8", f"{name} has a byte that is not UTF-8")
        question = require_str(row, "question", name)
        if not ids:
            raise RowError("missing_image_id", f"{name} has no dataset_image_ids")
        truth, qtype = _ground_truth(row, name)
        urls = [u.strip() for u in require_str(row, "wikipedia_url", name).split("|") if u.strip()]
        if qtype == "2_hop" and len(urls) != 2:
            raise RowError("malformed_wikipedia_url", f"{name}: a 2_hop row needs two URLs, got {len(urls)}")
        if qtype != "2_hop" and len(urls) != 1:
            raise RowError("malformed_wikipedia_url", f"{name}: expected one URL, got {len(urls)}")
        if row.get("dataset_name") not in ("landmarks", "inaturalist"):
            raise RowError("unknown_dataset_name", f"{name}: dataset_name {row.get('dataset_name')!r}")
    except RowError as err:
        for _ in range(max(1, len(ids))):
            report.reject(split, err.reason, str(err))
        return []
    samples = []
    for j, image_id in enumerate(ids):
        path = find_image(row.get("dataset_name", ""), image_id)
        if path is None:
            report.reject(
                split, "missing_image", f"{name}: {row.get('dataset_name')} image {image_id} not found"
            )
            continue
        extra = {"hop_urls": urls, "dataset_name": row.get("dataset_name"), "image_id": image_id}
        samples.append(
            Sample(
                f"evqa_{split}_{name.split(':')[-1]}_{j}",
                split,
                question,
                (path,),
                (urls[0],),
                truth,
                qtype,
                extra,
            )
        )
    return samples


def read(
    raw: Path,
    report: PrepReport,
    limit: int | None = None,
    kb: Path | None = None,
    landmarks: Path | None = None,
    inaturalist: Path | None = None,
) -> tuple[list[Article], list[Sample]]:
    """The KB articles and the usable samples of every CSV present (first ``limit`` CSV rows per split)."""
    kb_path = kb or raw / KB_NAME
    if not kb_path.exists():
        raise FileNotFoundError(
            f"no E-VQA KB at {kb_path} (unzip encyclopedic_kb_wiki.zip there or pass --kb)"
        )
    articles = read_kb_file(kb_path, report)
    find_image = ImageFinder(raw, landmarks, inaturalist)
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # evidence cells can be long
    samples: list[Sample] = []
    found = False
    for split in SPLITS:
        path = raw / f"{split}.csv"
        if not path.exists():
            continue
        found = True
        report.read(split, 0)  # an empty file is a split of no rows (written empty), not a split never given
        # utf-8-sig: a CSV re-saved with a BOM keeps its first column's name; a byte that is not UTF-8 is
        # escaped and rejects its own row (``not_utf8``), not the file.
        with path.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None:  # a 0-byte file: no header and no row, like a header alone
                continue
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise UnreadableFile(f"{path}: header lacks columns {missing}; found {reader.fieldnames}")
            for number, row in enumerate(reader, 2):
                if limit is not None and number - 2 >= limit:
                    break
                samples += _samples(row, split, f"{path.name}:{number}", find_image, report)
    if not found:
        raise FileNotFoundError(f"no train.csv / val.csv / test.csv in {raw}")
    return articles, samples


def image_urls(raw: Path, kb: Path | None = None) -> list[str]:
    """Reference-image URLs of the KB (what ``ragym prep kb-images`` fetches)."""
    return [a.image_url for a in read_kb_file(kb or raw / KB_NAME, PrepReport("evqa")) if a.image_url]
