"""Made-up rows in the exact official formats of InfoSeek, E-VQA and MMhops (``../shared/DATASETS.md``), with
real photographs from ``skimage.data``, every documented variant, and broken rows of each kind.

Each writer returns the rejections the readers must report, as ``{split: {reason: count}}``.
"""

from __future__ import annotations

import csv
import json
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image

from ragym.data_prep.kb_images import image_file

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "colorwheel")
TITLES = (
    "Astronaut portrait",
    "Coffee cup",
    "Chelsea the cat",
    "Saturn rocket",
    "Hubble deep field",
    "Colour wheel",
)
SIDE = 64
TEXT = (
    "{t} is an entity of the fixture KB. It was described in 1887 by several authors. "
    "Its height is about 30 metres according to one survey! Is it famous? Yes. "
) * 8


def photo(index: int, view: int = 0) -> Image.Image:
    """A real photograph, small; ``view`` 0 is the KB reference, others are query crops."""
    import skimage.data

    pixels = getattr(skimage.data, PHOTOS[index])()
    h, w = pixels.shape[:2]
    crop = (0, 0, w, h) if view == 0 else (w // 10 * view % (w // 3), h // 12, w - w // 8, h - h // 10)
    return Image.fromarray(np.ascontiguousarray(pixels)).crop(crop).resize((SIDE, SIDE))


def url(i: int) -> str:
    return f"http://127.0.0.1:9/commons/{i}/{TITLES[i].replace(' ', '_')}.jpg"


def _jsonl(path: Path, rows: list) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _kb_images(raw: Path, count: int) -> None:
    for i in range(count):
        target = image_file(raw / "kb_images", url(i))
        target.parent.mkdir(parents=True, exist_ok=True)
        photo(i).save(target)


def _title(qid: int) -> str:
    return TITLES[qid - 100] if 0 <= qid - 100 < len(TITLES) else "Unknown"


def write_infoseek(raw: Path) -> dict[str, dict[str, int]]:
    """InfoSeek QA + withkb + qtype JSONL, a Wiki6M-format KB, OVEN / flat / id2image image layouts."""
    raw.mkdir(parents=True)
    kb = [
        {
            "wikidata_id": f"Q{100 + i}",
            "wikipedia_title": t,
            "wikipedia_content": TEXT.format(t=t),
            "wikipedia_summary": t,
            "wikipedia_image_url": url(i),
        }
        for i, t in enumerate(TITLES)
    ]
    kb.append(
        {
            "wikidata_id": "Q200",
            "wikipedia_title": "Imageless place",
            "wikipedia_content": "",
            "wikipedia_summary": "A place with no picture.",
            "wikipedia_image_url": None,
        }
    )
    kb += [
        '{"wikidata_id": "Q201", "wikipedia_title": broken',
        {"wikidata_id": "Q202", "wikipedia_title": "Empty"},
    ]
    _jsonl(raw / "Wiki6M_ver_1_0.jsonl", kb)
    _kb_images(raw, len(TITLES))
    for i in range(len(TITLES)):  # OVEN layout: oven_images/<NN>/<image_id>.jpg (or .JPEG)
        image_id = f"oven_{i + 10:02d}{i:06d}"
        target = (
            raw / "oven_images" / image_id.split("_")[-1][:2] / f"{image_id}{'.JPEG' if i == 1 else '.jpg'}"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        photo(i, view=1).save(target, format="JPEG")
    (raw / "images").mkdir()
    photo(2, view=2).save(raw / "images" / "oven_90000002.jpg")  # flat layout
    photo(3, view=2).convert("L").save(raw / "elsewhere.png")  # id2image.jsonl, grayscale
    _jsonl(raw / "id2image.jsonl", [{"image_id": "oven_91000003", "image_path": "elsewhere.png"}])
    Image.new("RGB", (SIDE, SIDE), (0, 0, 0)).save(raw / "images" / "oven_92000000.jpg")  # unreachable
    ans = {"wikidata": 30.0, "range": [27.0, 33.0]}

    def row(n: int, split: str, image: str, answer_eval, question="What is this?", data_split=None) -> dict:
        return {
            "data_id": f"infoseek_{split}_{n:08d}",
            "image_id": image,
            "question": question,
            "answer": ["x"],
            "answer_eval": answer_eval,
            "data_split": data_split or split,
        }

    train = [
        row(0, "train", "oven_10000000", ["Astronaut portrait", "astronaut"]),
        row(1, "train", "oven_11000001", [ans]),  # numerical: list of objects
        row(2, "train", "oven_12000002", ans),  # numerical: bare object
        row(3, "train", "oven_13000003", ["27.0", "33.0"]),  # numerical: flat [lo, hi]
        row(4, "train", "oven_14000004", ["1887"]),  # time (inferred)
        row(5, "train", "oven_90000002", ["Chelsea"]),  # flat images/ layout
        row(6, "train", "oven_91000003", ["Saturn"]),  # id2image.jsonl
        row(7, "train", "oven_92000000", ["x"]),  # black query, gold = colour wheel: unreachable
        '{"data_id": "infoseek_train_00000008", "image_id": ',  # malformed_json
        {**row(9, "train", "oven_10000000", ["x"]), "question": ""},  # missing_question
        row(10, "train", "oven_99999999", ["x"]),  # missing_image
        row(11, "train", "oven_10000000", ["x"]),  # gold_entity_not_in_kb (Q999)
        row(12, "train", "oven_10000000", ["x"]),  # missing_gold_entity (no withkb line)
        row(13, "train", "oven_10000000", [{"wikidata": 1.0}]),  # malformed_answer
    ]
    gold = {0: 100, 1: 101, 2: 102, 3: 103, 4: 104, 5: 102, 6: 103, 7: 105, 9: 100, 10: 100, 11: 999, 13: 100}
    _jsonl(raw / "infoseek_train.jsonl", train)
    _jsonl(
        raw / "infoseek_train_withkb.jsonl",
        [
            {"data_id": f"infoseek_train_{n:08d}", "entity_id": f"Q{q}", "entity_text": _title(q)}
            for n, q in gold.items()
        ],
    )
    val = [
        row(0, "val", "oven_10000000", ["Astronaut portrait"], data_split="val_unseen_question"),
        row(1, "val", "oven_11000001", [ans], data_split="val_unseen_entity"),
        row(2, "val", "oven_92000000", ["1887"], data_split="val_unseen_entity"),  # unreachable: kept
        row(3, "val", "oven_12000002", ["x"], data_split="val_unseen_entity"),  # qtype "Colour"
        # Evaluation rows whose gold the KB cannot name are kept (gold null): Q999, then no withkb line.
        row(4, "val", "oven_13000003", ["Saturn"], data_split="val_unseen_entity"),
        row(5, "val", "oven_10000000", ["Astronaut"], data_split="val_unseen_question"),
    ]
    _jsonl(raw / "infoseek_val.jsonl", val)
    _jsonl(
        raw / "infoseek_val_withkb.jsonl",
        [
            {"data_id": f"infoseek_val_{n:08d}", "entity_id": f"Q{q}"}
            for n, q in {0: 100, 1: 101, 2: 105, 3: 102, 4: 999}.items()
        ],
    )
    qtypes = ["String", "numerical", "TIME", "Colour", "String", "String"]
    _jsonl(
        raw / "infoseek_val_qtype.jsonl",
        [{"data_id": f"infoseek_val_{n:08d}", "question_type": q} for n, q in enumerate(qtypes)],
    )
    return {
        "kb": {"malformed_json": 1, "kb_entry_without_text": 1},
        "train": {
            "malformed_json": 1,
            "missing_question": 1,
            "missing_image": 1,
            "gold_entity_not_in_kb": 1,
            "missing_gold_entity": 1,
            "malformed_answer": 1,
            "unreachable": 1,
        },
        "val": {"unknown_question_type": 1},
    }


WIKI = "https://en.wikipedia.org/wiki/"
EVQA_COLUMNS = [
    "question_original",
    "wikipedia_url",
    "question",
    "answer",
    "dataset_image_ids",
    "dataset_name",
    "dataset_category_id",
    "question_type",
    "wikipedia_title",
    "evidence",
    "evidence_section_id",
    "evidence_section_title",
    "encyclopedic_vqa_split",
    "wikipedia_url_used_in_train",
]
"""A column order unlike the README's: readers must go by name."""
LANDMARK_IDS = ("6e158a47eb2ca3f6", "0a1b2c3d4e5f6071", "fedcba9876543210")


def _evqa_row(split: str, question: str, answer: str, ids: str, dataset: str, qtype: str, urls: str) -> dict:
    return {
        "question": question,
        "answer": answer,
        "dataset_image_ids": ids,
        "dataset_name": dataset,
        "dataset_category_id": "1",
        "question_type": qtype,
        "wikipedia_url": urls,
        "wikipedia_title": "t",
        "evidence": "",
        "evidence_section_id": "0",
        "evidence_section_title": "t",
        "encyclopedic_vqa_split": split,
        "question_original": question,
        "wikipedia_url_used_in_train": "True",
    }


def write_evqa(raw: Path) -> dict[str, dict[str, int]]:
    """E-VQA CSVs (columns shuffled), the KB JSON keyed by URL, GLDv2 and iNaturalist (id2name) layouts."""
    raw.mkdir(parents=True)
    kb = {}
    for i, t in enumerate(TITLES):
        key = WIKI + t.replace(" ", "_")
        kb[key] = {
            "title": t,
            "section_titles": [t, "History"],
            "section_texts": [TEXT.format(t=t), "Built in 1901."],
            "image_urls": [url(i)],
            "image_reference_descriptions": ["d"],
            "image_section_indices": [0],
            "url": key,
        }
    kb[WIKI + "Imageless"] = {
        "title": "Imageless place",
        "section_titles": ["Imageless place"],
        "section_texts": ["A place with no picture."],
        "image_urls": [],
        "url": "",
    }
    kb[WIKI + "Nameless"] = {
        "title": "",
        "section_titles": [],
        "section_texts": ["x"],
        "image_urls": [],
        "url": "",
    }
    (raw / "encyclopedic_kb_wiki.json").write_text(json.dumps(kb))
    _kb_images(raw, len(TITLES))
    for i, image_id in enumerate(LANDMARK_IDS):  # landmarks: <id[0]>/<id[1]>/<id[2]>/<id>.jpg
        target = raw / "landmarks" / image_id[0] / image_id[1] / image_id[2] / f"{image_id}.jpg"
        target.parent.mkdir(parents=True)
        photo(i, view=1 + i % 2).save(target)
    (raw / "inaturalist" / "val" / "02912_Chelsea").mkdir(parents=True)
    photo(2, view=1).save(raw / "inaturalist" / "val" / "02912_Chelsea" / "4242.jpg")
    (raw / "inaturalist" / "val_id2name.json").write_text(json.dumps({"4242": "val/02912_Chelsea/4242.jpg"}))
    u = [WIKI + t.replace(" ", "_") for t in TITLES]
    ids = LANDMARK_IDS
    train = [
        _evqa_row(
            "train",
            "Who is this?",
            "Astronaut portrait|astronaut",
            f"{ids[0]}|{ids[1]}",
            "landmarks",
            "templated",
            u[0],
        ),  # 2 pairs: the second image shows another entity (may be unreachable)
        _evqa_row(
            "train", "Which designers?", "Ann Smith&&Bob Jones", ids[1], "landmarks", "multi_answer", u[1]
        ),
        _evqa_row("train", "Who built the second?", "Bob", ids[2], "landmarks", "2_hop", f"{u[2]}|{u[4]}"),
        _evqa_row("train", "Q?", "...", ids[0], "landmarks", "automatic", u[0]),  # malformed_answer
        _evqa_row("train", "Q?", "x", ids[0], "landmarks", "riddle", u[0]),  # unknown_question_type
        _evqa_row("train", "Q?", "x", ids[2], "landmarks", "2_hop", u[2]),  # malformed_wikipedia_url
        _evqa_row("train", "Q?", "x", "", "landmarks", "automatic", u[0]),  # missing_image_id
        _evqa_row("train", "Q?", "x", "ffffffffffffffff", "landmarks", "automatic", u[0]),  # missing_image
        _evqa_row("train", "Q?", "x", ids[0], "landmarks", "automatic", WIKI + "Not_in_kb"),  # not in KB
        _evqa_row("train", "Q?", "x", ids[0], "gldv3", "automatic", u[0]),  # unknown_dataset_name
    ]
    test = [
        _evqa_row(
            "test",
            "What is the usual clutch size of this cat?",
            "3|3-4",
            "4242",
            "inaturalist",
            "automatic",
            u[2],
        ),
        _evqa_row("test", "Who is this?", "Astronaut", ids[0], "landmarks", "templated", u[0]),
        _evqa_row("test", "Q?", "x", ids[1], "landmarks", "automatic", WIKI + "Not_in_kb"),  # kept, gold null
    ]
    for split, rows in (("train", train), ("test", test), ("val", test[:1])):
        with (raw / f"{split}.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, EVQA_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return {
        "kb": {"kb_entry_without_title": 1},
        "train": {
            "malformed_answer": 1,
            "unknown_question_type": 1,
            "malformed_wikipedia_url": 1,
            "missing_image_id": 1,
            "missing_image": 1,
            "gold_entity_not_in_kb": 1,
            "unknown_dataset_name": 1,
        },
    }


def _png(image: Image.Image) -> bytes:
    buffer = BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_mmhops(raw: Path) -> dict[str, dict[str, int]]:
    """The MMhops dataset repository (parquet shards as the hub client lays them out) and MMhops-KB."""
    from datasets import Dataset, Features, List, Value
    from datasets import Image as HFImage

    kb = raw / "MMhops-KB"
    (kb / "image" / "images").mkdir(parents=True)
    (kb / "text").mkdir()
    corpus = []
    for i, t in enumerate(TITLES):
        photo(i).save(kb / "image" / "images" / f"{i}.jpg")
        corpus.append({"id": i, "title": t, "entity_id": f"Q{100 + i}", "image_path": f"images/{i}.jpg"})
    corpus.append({"id": 6, "title": "No picture", "entity_id": "Q300", "image_path": "images/missing.jpg"})
    _jsonl(kb / "image" / "image_corpus.jsonl", [*corpus, {"id": 7, "entity_id": "Q301"}])  # no title
    texts = [{"id": i, "contents": f'"{t}"\n{TEXT.format(t=t)}'} for i, t in enumerate(TITLES)]
    texts += [{"id": 6, "contents": '"Loose page"\nA passage of no KB entity.'}, {"id": 7, "contents": ""}]
    _jsonl(kb / "text" / "text_corpus.jsonl", texts)
    features = Features(
        {
            "id": Value("string"),
            "problem": Value("string"),
            "answer": Value("string"),
            "answer_eval": List(Value("string")),
            "split": Value("string"),
            "problem_type": Value("string"),
            "images": List(HFImage()),
            "entity_ids": List(Value("string")),
        }
    )

    def row(n: str, problem: str, answer_eval: list, kind: str, ptype: str, photos: list, golds) -> dict:
        return {
            "id": f"MMhops_{n}",
            "problem": problem,
            "answer": "a",
            "answer_eval": answer_eval,
            "split": kind,
            "problem_type": ptype,
            "images": [{"bytes": _png(photo(p, view=1)), "path": None} for p in photos],
            "entity_ids": golds,
        }

    shards = {
        "train-00000-of-00002": [
            row("train_00001", "<image>Who made this?", ["Saturn"], "Bridge", "String", [3], ["Q103"]),
            row(
                "train_00002",
                "<image><image>How many years apart?",
                ["10.8", "13.2"],
                "Compare",
                "Numerical",
                [0, 1],
                ["Q100", "Q101"],
            ),
            row("train_00003", "<image>When?", ["1887"], "bridge", "time", [2], None),  # gold unknown, kept
        ],
        "train-00001-of-00002": [
            row(
                "train_00004", "<image>How tall?", ["x", "y"], "Bridge", "Numerical", [0], ["Q100"]
            ),  # malformed
            row(
                "train_00005", "<image>Q", ["a"], "Comparison", "String", [0], ["Q100"]
            ),  # unknown_split_kind
            row(
                "train_00006", "<image><image>Q", ["a"], "Compare", "String", [0], ["Q100"]
            ),  # count mismatch
            row("train_00007", "Q", ["a"], "Bridge", "String", [], []),  # missing_image
            row("train_00008", "<image>Q", ["a"], "Bridge", "String", [0], ["Q999"]),  # gold_entity_not_in_kb
        ],
        "validation-00000-of-00001": [
            row("validation_00001", "<image>Who?", ["Coffee"], "Bridge", "String", [1], ["Q101"])
        ],
        "test-00000-of-00001": [
            row(
                "test_00001",
                "<image><image>Which is older?",
                ["cat"],
                "Compare",
                "String",
                [2, 4],
                ["Q102", "Q104"],
            ),
            row("test_00002", "<image>How many?", ["2", "3"], "Bridge", "Numerical", [5], ["Q105"]),
            # gold not in the KB: an evaluation row, kept with a null gold
            row("test_00003", "<image>Who?", ["Coffee"], "Bridge", "String", [1], ["Q999"]),
        ],
    }
    (raw / "data").mkdir()
    for name, rows in shards.items():
        columns = {k: [r[k] for r in rows] for k in features}
        Dataset.from_dict(columns, features=features).to_parquet(str(raw / "data" / f"{name}.parquet"))
    (raw / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# MMhops (fixture)\n")
    return {
        "kb": {"missing_title": 1},
        "kb_text": {"kb_passage_without_contents": 1},
        "train": {
            "malformed_answer": 1,
            "unknown_split_kind": 1,
            "image_count_mismatch": 1,
            "missing_image": 1,
            "gold_entity_not_in_kb": 1,
        },
    }
