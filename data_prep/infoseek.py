"""InfoSeek reader: official JSON Lines (+ withkb entity ids, qtype) and the Wiki6M-format KB, by field name.

``--raw`` holds, under their official names (``../shared/DATASETS.md`` section 1):
``infoseek_{train,val}.jsonl``, ``infoseek_{train,val}_withkb.jsonl``, ``infoseek_val_qtype.jsonl`` (a
``infoseek_train_qtype.jsonl`` is used when present), a KB file (the first of ``KB_NAMES`` found, or
``--kb``), and the query images in the OVEN layout ``oven_images/<NN>/<image_id>.{jpg,JPEG}``, a flat
``images/<image_id>.{jpg,JPEG}`` folder, or an ``id2image.jsonl`` of ``{"image_id", "image_path"}``.

Accepted variants: numerical ``answer_eval`` as a list of ``{"wikidata", "range"}``, one bare object, or a
flat ``[lo, hi]``; ``data_split`` matched by suffix (``unseen_question`` / ``unseen_entity``); question types
in any case. Train rows have no official qtype file: a dict ``answer_eval`` (or a flat pair of decimals or JSON
numbers) is Numerical, answers that are all years/dates are Time, anything else String
(``extra.question_type_inferred`` marks it).

Gold entities: the withkb ``entity_id`` (a QID) is matched to the KB article carrying that QID, and only where
the KB carries none for it, to an article without a QID by the withkb ``entity_text`` title; the report counts
each way per split (``gold_match``). A row with no withkb line or no matching article keeps a null gold in
evaluation splits (scored on its answer) and is rejected from training (``ragym.data_prep.kb_build``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragym.data_prep.kb_files import read_kb_file
from ragym.data_prep.kb_records import Article, RowError, Sample, require_str
from ragym.data_prep.report import PrepReport
from ragym.envs.files import read_jsonl
from ragym.rewards.answers import score_answer

SPLITS = ("train", "val")
KB_NAMES = (
    "infoseek_100k_kb.jsonl",
    "wiki_100_dict_v4.jsonl",
    "Wiki100k_ver_1_0-all.json",
    "infoseek_100k_wiki.json",
    "Wiki6M_ver_1_0.jsonl",
    "Wiki6M_ver_1_0.jsonl.gz",
)
"""KB files looked for in ``--raw``, the paper's 100K-page subsets first."""
_QTYPES = {"string": "String", "numerical": "Numerical", "time": "Time"}
_DATE = re.compile(
    r"^\s*(\d{1,2}\s+\w+\s+)?\d{3,4}(\s*(BC|BCE|AD|CE))?\s*$|^\d{4}-\d{2}-\d{2}$", re.IGNORECASE
)


def find_kb(raw: Path) -> Path:
    """The KB file in ``raw`` (first of ``KB_NAMES``); a clear error when there is none."""
    for name in KB_NAMES:
        if (raw / name).exists():
            return raw / name
    raise FileNotFoundError(f"no InfoSeek KB in {raw}: expected one of {KB_NAMES} (or pass --kb)")


def _by_data_id(path: Path, field: str, report: PrepReport, split: str) -> dict[str, Any]:
    """``data_id -> row`` of a side file (withkb, qtype); empty when the file is absent. Each line is counted
    under ``split`` (``val_withkb``, ...): a line that is not a JSON object (``malformed_json``), lacks
    ``data_id`` or ``field`` (``missing_<field>``) or repeats a data_id (``duplicate_id``: the first stands) is
    rejected, and its QA row goes on as if it had no line here."""
    out: dict[str, Any] = {}
    if not path.exists():
        return out
    report.read(split, 0)
    for number, row in read_jsonl(path, yield_broken=True):
        report.read(split)
        where = f"{path.name}:{number}"
        if not isinstance(row, dict):
            report.reject(split, "malformed_json", f"{where}: {row}")
        elif not isinstance(row.get("data_id"), str) or row.get(field) is None:
            missing = field if isinstance(row.get("data_id"), str) else "data_id"
            report.reject(split, f"missing_{missing}", f"{where} has no {missing}")
        elif row["data_id"] in out:
            report.reject(split, "duplicate_id", f"{where}: {row['data_id']} has a line before")
        else:
            out[row["data_id"]] = row
            report.keep(split)
    return out


class ImageFinder:
    """Resolves an OVEN ``image_id`` to a local file in any of the documented layouts."""

    def __init__(self, raw: Path, image_dir: Path | None = None):
        self.roots = [image_dir] if image_dir else [raw / "oven_images", raw / "images", raw]
        self.mapped: dict[str, str] = {}
        for root in [raw, *self.roots]:
            if (root / "id2image.jsonl").exists():
                for _, row in read_jsonl(root / "id2image.jsonl", yield_broken=True):
                    if isinstance(row, dict) and "image_id" in row and "image_path" in row:
                        path = Path(row["image_path"])
                        self.mapped[str(row["image_id"])] = str(path if path.is_absolute() else root / path)

    def __call__(self, image_id: str) -> str | None:
        """The image file of ``image_id``, or None when no layout has it."""
        if image_id in self.mapped and Path(self.mapped[image_id]).exists():
            return self.mapped[image_id]
        shard = image_id.split("_")[-1][:2]
        for root in self.roots:
            for ext in (".jpg", ".JPEG", ".jpeg", ".png"):
                for path in (root / shard / f"{image_id}{ext}", root / f"{image_id}{ext}"):
                    if path.exists():
                        return str(path)
        return None


def _flat_range(items: list[Any]) -> bool:
    """A flat ``[lo, hi]``: two JSON numbers, or two numeric strings with a decimal point (years have none)."""
    if len(items) != 2 or any(isinstance(a, bool) for a in items):
        return False
    if all(isinstance(a, (int, float)) for a in items):
        return True
    return all(isinstance(a, str) and re.fullmatch(r"-?\d+\.\d*", a.strip()) for a in items)


def _question_type(row: dict[str, Any], qtype: dict[str, Any] | None) -> tuple[str, bool]:
    """(String | Numerical | Time, inferred?)."""
    if qtype is not None:
        value = str(qtype["question_type"]).lower()
        if value not in _QTYPES:
            raise RowError("unknown_question_type", f"{row.get('data_id')}: question_type {value!r}")
        return _QTYPES[value], False
    answer_eval = row.get("answer_eval")
    items = answer_eval if isinstance(answer_eval, list) else [answer_eval]
    if any(isinstance(a, dict) for a in items) or _flat_range(items):
        return "Numerical", True
    if items and all(isinstance(a, str) and _DATE.match(a) for a in items):
        return "Time", True
    return "String", True


def _sample(row: Any, split: str, withkb: dict, qtypes: dict, find_image: ImageFinder) -> Sample:
    """One QA row as a ``Sample`` (raises ``RowError`` with the reason it cannot be used)."""
    if not isinstance(row, dict):
        raise RowError("malformed_json", f"line is not a JSON object: {row}")
    data_id = require_str(row, "data_id", "row")
    question = require_str(row, "question", data_id)
    image_id = require_str(row, "image_id", data_id)
    if "answer_eval" not in row:
        raise RowError("missing_answer_eval", f"{data_id} has no answer_eval (test/human rows have none)")
    qtype, inferred = _question_type(row, qtypes.get(data_id))
    gold = (
        withkb.get(data_id) or {}
    )  # none: the row still scores on its answer (ragym.data_prep.kb_build decides)
    answer_eval = row["answer_eval"]
    if qtype != "Numerical" and (
        not isinstance(answer_eval, list)
        or not all(isinstance(a, str) for a in answer_eval)
        or not any(a.strip() for a in answer_eval)  # only empty aliases: no prediction could match
    ):
        raise RowError(
            "malformed_answer", f"{data_id}: {qtype} answer_eval must be a list of strings, one not empty"
        )
    truth = {"answer_eval": answer_eval, "question_type": qtype}
    try:
        score_answer("infoseek", "", truth)
    except ValueError as err:
        raise RowError("malformed_answer", f"{data_id}: {err}") from err
    path = find_image(image_id)
    if path is None:
        raise RowError("missing_image", f"{data_id}: image {image_id} is in none of the OVEN layouts")
    extra = {
        "data_split": str(row.get("data_split", split)),
        "entity_text": gold.get("entity_text"),
        "answer": row.get("answer"),
        "question_type_inferred": inferred,
    }
    if "entity_id" not in gold:
        extra["gold_missing"] = "missing_gold_entity"
    gold_key = str(gold["entity_id"]) if "entity_id" in gold else None
    return Sample(data_id, split, question, (path,), (gold_key,), truth, qtype, extra)


def _to_kb_keys(samples: list[Sample], articles: list[Article], report: PrepReport) -> list[Sample]:
    """Map each withkb QID onto its KB article: by QID where the KB carries QIDs, else by the withkb entity
    title among articles with no QID (a title never overrides a QID); counted per split under ``gold_match``."""
    by_qid = {a.qid: a.key for a in articles if a.qid is not None}
    by_title: dict[str, str] = {}
    for a in articles:
        if a.qid is None:
            by_title.setdefault(a.title, a.key)
    counts = report.details.setdefault("gold_match", {})
    out = []
    for s in samples:
        qid, title = s.gold_keys[0], s.extra.get("entity_text")
        if qid is None:
            how, key = "no_gold", None
        elif qid in by_qid:
            how, key = "qid", by_qid[qid]
        elif title in by_title:
            how, key = "title", by_title[title]
        else:
            how, key = "unmatched", qid  # kb_build rejects it from training, keeps it (gold null) elsewhere
        split_counts = counts.setdefault(s.split, {"qid": 0, "title": 0, "unmatched": 0, "no_gold": 0})
        split_counts[how] += 1
        out.append(replace(s, gold_keys=(key,)))
    return out


def read(
    raw: Path,
    report: PrepReport,
    limit: int | None = None,
    kb: Path | None = None,
    image_dir: Path | None = None,
) -> tuple[list[Article], list[Sample]]:
    """The KB articles and the usable samples of every split present in ``raw`` (first ``limit`` per split)."""
    if not any((raw / f"infoseek_{split}.jsonl").exists() for split in SPLITS):  # before a KB of millions
        raise FileNotFoundError(f"no infoseek_{{train,val}}.jsonl in {raw}")
    articles = read_kb_file(kb or find_kb(raw), report)
    find_image = ImageFinder(raw, image_dir)
    samples: list[Sample] = []
    for split in SPLITS:
        path = raw / f"infoseek_{split}.jsonl"
        if not path.exists():
            continue
        report.read(split, 0)  # an empty file is a split of no rows (written empty), not a split never given
        withkb = _by_data_id(raw / f"infoseek_{split}_withkb.jsonl", "entity_id", report, f"{split}_withkb")
        qtypes = _by_data_id(raw / f"infoseek_{split}_qtype.jsonl", "question_type", report, f"{split}_qtype")
        for count, (number, row) in enumerate(read_jsonl(path, yield_broken=True)):
            if limit is not None and count >= limit:
                break
            report.read(split)
            try:
                if isinstance(row, Exception):
                    raise RowError("malformed_json", f"{path.name}:{number}: {row}")
                samples.append(_sample(row, split, withkb, qtypes, find_image))
            except RowError as err:
                report.reject(split, err.reason, f"{path.name}:{number}: {err}")
    return articles, _to_kb_keys(samples, articles, report)


def image_urls(raw: Path, kb: Path | None = None) -> list[str]:
    """Reference-image URLs of the KB (what ``ragym prep kb-images`` fetches)."""
    return [a.image_url for a in read_kb_file(kb or find_kb(raw), PrepReport("infoseek")) if a.image_url]
