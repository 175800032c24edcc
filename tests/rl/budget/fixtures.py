"""Rows of every env at the papers' settings over real-size images made at test time (no download), and an
English tokenizer trained offline for the text counts."""

from __future__ import annotations

import functools
import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from tests.photos import photo

REPO_ROOT = Path(__file__).resolve().parents[3]
QUERY_SIZE = (4000, 3000)
"""Query photos: 12 MP, as a phone takes them."""
CANDIDATE_SIZES = ((2400, 1800), (1800, 2400))
"""KB-VQA candidates, R3G corpus images: Wikimedia-sized originals, both orientations."""
PAGE_SIZE = (1700, 2200)
"""DocMemo pages: a letter page rendered at 200 dpi."""


@functools.cache
def jpeg(width: int, height: int, index: int = 0) -> bytes:
    """A ``width x height`` photo as JPEG bytes (made once per size: copying bytes is faster than encoding)."""
    buffer = io.BytesIO()
    Image.fromarray(photo(width, height, index)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def put_photo(path: str | Path, size: tuple[int, int], index: int = 0) -> None:
    """Overwrite ``path`` with a photo of ``size`` (any extension: the readers sniff the format)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(jpeg(*size, index))


def english_tokenizer(out: Path) -> Path:
    """A byte-level BPE (8k vocabulary, Qwen's special tokens and ChatML template) trained on Python's own
    documentation, none of it env text: ~3 characters per token on the envs' prompts, fewer than Qwen's ~4, so
    its text counts err high."""
    from pydoc_data.topics import topics

    from ragym.rl.tiny.policy import train_tokenizer

    train_tokenizer(list(topics.values()), 8192).save_pretrained(out)
    return out


def verl_row(
    index: int, env_id: str, env_kwargs: dict[str, Any], options: dict[str, Any], source: str, truth: Any
) -> dict[str, Any]:
    """One verl parquet row of ``env_id`` with its env kwargs and reset options."""
    return {
        "data_source": source,
        "agent_name": "ragym_env",
        "prompt": [{"role": "user", "content": "task"}],
        "ability": "test",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth)},
        "extra_info": {
            "index": index,
            "split": "test",
            "env_id": env_id,
            "env_kwargs": json.dumps(env_kwargs),
            "env_options": json.dumps(options),
        },
    }


def kbvqa_rows(out: Path) -> Path:
    """A tiny synthetic KB whose first comparison row (2 query images) and first single-image row show 12 MP
    query photos and multi-megapixel candidates in every batch the paper's episode can reach (Rej_max + 1 of K)."""
    from dataclasses import replace

    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.envs.kbvqa import kb as kb_module

    root = build_kb(out / "kb", replace(PRESETS["tiny"], num_rows=40, comparison_fraction=0.3), seed=3)
    frame = pd.read_parquet(root / "data" / "train.parquet")
    counts = [len(json.loads(e["env_options"])["query_images"]) for e in frame["extra_info"]]
    chosen = frame.iloc[[counts.index(2), counts.index(1)]]
    kb = kb_module.load_kb(root)
    for extra in chosen["extra_info"]:
        for query in json.loads(extra["env_options"])["query_images"]:
            path = kb.resolve(query)
            hits = kb.candidate_retriever().search(path, 15)  # the paper's 3 batches of K = 5
            for i, hit in enumerate(hits):
                put_photo(hit.payload["image"], CANDIDATE_SIZES[i % 2], i)
            put_photo(path, QUERY_SIZE)
    rows = out / "kbvqa.parquet"
    chosen.to_parquet(rows)
    return rows


def r3g_rows(out: Path) -> Path:
    """A synthetic R3G task (P = 5, k = 1) whose corpus and query images are replaced by photos."""
    from ragym.data_prep.r3g_synthetic import Preset, build_task

    task = build_task(out / "r3g", Preset(num_classes=2, queries_per_class=2, test_fraction=0.5, pool_size=5))
    for i, path in enumerate(sorted((task / "corpus" / "images").glob("*.png"))):
        put_photo(path, CANDIDATE_SIZES[i % 2], i)
    for path in (task / "queries").glob("*.png"):
        put_photo(path, QUERY_SIZE)
    return task / "data" / "train.parquet"


def _english(num: int, chars: int) -> list[str]:
    """``num`` passages of ``chars`` characters of real English (ragym's manual, docs/, wrapped around), its
    literal ``<image>`` placeholders defused: MEMORA-v0 shows query and document text verbatim, and a stray
    placeholder there is an episode error (more markers than images) in the agent loop."""
    manual = " ".join(page.read_text(encoding="utf-8") for page in sorted((REPO_ROOT / "docs").glob("*.md")))
    text = " ".join(manual.replace("<image>", "(image)").split())
    return [(text * 2)[i * chars : (i + 1) * chars] for i in range(num)]


def memora_rows(out: Path) -> Path:
    """MM-BRIGHT-like rows: a 12 MP query photo, a 150-document corpus of 600-character posts."""
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "documents.jsonl"
    docs = _english(150, 600)
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "content": d}) + "\n" for i, d in enumerate(docs)))
    rows = []
    for i in range(2):
        put_photo(out / f"query{i}.jpg", QUERY_SIZE, i)
        options = {
            "query": docs[10 * i][:300],
            "query_id": f"q{i}",
            "domain": "test",
            "qrels": {f"d{i}": 1},
            "excluded_ids": [],
            "image_path": str(out / f"query{i}.jpg"),
        }
        kwargs = {"corpus_path": str(corpus), "memory_frozen": True}
        rows.append(verl_row(i, "MEMORA-v0", kwargs, options, "mm_bright", {"qrels": options["qrels"]}))
    pd.DataFrame(rows).to_parquet(out / "memora.parquet")
    return out / "memora.parquet"


def docmemo_rows(out: Path, num_pages: int = 30) -> Path:
    """One 30-page document store (letter pages at 200 dpi, 2,000 characters of text each) and two questions."""
    from ragym.envs.docmemo.store import DocStore, Section, save_store, summarise
    from ragym.envs.retrieval.page_encoders import TEXT_ENCODER_NAME

    texts = _english(num_pages, 2000)
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(num_pages, 384)).astype(np.float32)
    store = DocStore(
        doc_id="report.pdf",
        texts=tuple(texts),
        summaries=tuple(summarise(t, 240) for t in texts),
        page_types=tuple(("text", "table", "chart", "image-heavy")[i % 4] for i in range(num_pages)),
        embeddings=embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True),
        encoder=TEXT_ENCODER_NAME,
        sections=tuple(Section(f"Section {i + 1}", 0, 1 + 3 * i) for i in range(10)),
    )
    directory = save_store(store, out / "docs" / "report", dpi=200)
    for page in range(1, num_pages + 1):
        put_photo(directory / "images" / f"page_{page:04d}.png", PAGE_SIZE, page)
    questions = (
        "What share of the tests run on CPU?",
        "Which recipe trains the MEMORA policy, and on what data?",
    )
    rows = [
        verl_row(
            i,
            "DocMemo-v0",
            {"store_root": str(out / "docs")},
            {"question": q, "doc_id": "report.pdf"},
            "mmlongbench_doc",
            {"answer": "x", "answer_format": "Str", "evidence_pages": [1]},
        )
        for i, q in enumerate(questions)
    ]
    pd.DataFrame(rows).to_parquet(out / "docmemo.parquet")
    return out / "docmemo.parquet"


def copy_rows(rows: Path, out: Path) -> Path:
    """A copy of a rows file (tests that damage one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rows, out)
    return out
