"""Tiny BRIGHT and MM-BRIGHT hub-layout copies in the exact formats of ../shared/DATASETS.md section 5.

Each holds good rows and one row per rejection reason; the ids look like the real ones.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

BRIGHT_DOCS = {
    "insects_attracted_to_light/Phototaxis_0.txt": "Phototaxis is movement toward light in insects.",
    "insects_attracted_to_light/Phototaxis_3.txt": "Moths steer by keeping a light source at a fixed angle.",
    "insects_attracted_to_light/Proximate_and_ultimate_causation_1.txt": "Proximate causes explain mechanisms.",
    "moth_lamps/Lamp_2.txt": "Street lamps use sodium vapour bulbs.",
    "bird_song/Song_0.txt": "Birds sing to defend territory.",
}


def write_bright(raw: Path, task: str = "biology") -> Path:
    """``raw/{examples,documents,long_documents}/<task>-00000-of-00001.parquet``: 6 examples, 7 document rows."""
    gold = list(BRIGHT_DOCS)[:3]
    examples = [
        {
            "id": "0",
            "query": "Why are insects attracted to light? My porch lamp is covered in moths.",
            "reasoning": "Phototaxis.",
            "gold_ids": gold,
            "gold_ids_long": ["insects_attracted_to_light/Phototaxis.txt"],
            "excluded_ids": ["N/A"],
            "gold_answer": "Transverse orientation.",
        },
        {
            "id": "1",
            "query": "Why do birds sing at dawn?",
            "reasoning": "",
            "gold_ids": ["bird_song/Song_0.txt"],
            "gold_ids_long": ["bird_song/Song.txt"],
            "excluded_ids": ["moth_lamps/Lamp_2.txt"],
            "gold_answer": "Territory.",
        },
        {
            "id": "2",
            "query": "   ",
            "reasoning": "",
            "gold_ids": gold,
            "gold_ids_long": [],
            "excluded_ids": ["N/A"],
            "gold_answer": "",
        },
        {
            "id": "3",
            "query": "What is a lamp?",
            "reasoning": "",
            "gold_ids": [],
            "gold_ids_long": [],
            "excluded_ids": ["N/A"],
            "gold_answer": "",
        },
        {
            "id": "4",
            "query": "Which bulb?",
            "reasoning": "",
            "gold_ids": ["moth_lamps/Lamp_9.txt"],
            "gold_ids_long": [],
            "excluded_ids": ["N/A"],
            "gold_answer": "",
        },
        {
            "id": "5",
            "query": "Lamp types?",
            "reasoning": "",
            "gold_ids": ["moth_lamps/Lamp_2.txt"],
            "gold_ids_long": [],
            "excluded_ids": ["moth_lamps/Lamp_2.txt"],
            "gold_answer": "",
        },
    ]
    documents = [{"id": d, "content": c} for d, c in BRIGHT_DOCS.items()]
    documents += [
        {"id": "bird_song/Song_0.txt", "content": "duplicate"},
        {"id": "x/broken_0.txt", "content": None},
    ]
    long_documents = [{"id": "insects_attracted_to_light/Phototaxis.txt", "content": "Phototaxis, long."}]
    for config, rows in (
        ("examples", examples),
        ("documents", documents),
        ("long_documents", long_documents),
    ):
        (raw / config).mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(raw / config / f"{task}-00000-of-00001.parquet")
    return raw


def _png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def write_mm_bright(raw: Path, domain: str = "academia") -> Path:
    """Task 1 ``examples``, Task 2 ``examples_multimodal/<domain>.parquet``, ``examples_images``, ``documents``."""
    docs = {
        f"{domain}/a7beca61_{i}.txt": f"Document {i} about plotting axes and figure legends {i}."
        for i in range(6)
    }
    base = {"gold_answers": ["use tight_layout"], "negative_ids": [f"{domain}/a7beca61_5.txt"]}
    examples = [
        {
            "id": "12",
            "query": "Why does my plot cut off the legend?",
            "gold_ids": [f"{domain}/a7beca61_1.txt"],
            "image_paths": [f"{domain}/q_12/image_1.png"],
            **base,
        },
        {
            "id": "13",
            "query": "Which axis scale is this?",
            "gold_ids": [f"{domain}/a7beca61_2.txt"],
            "image_paths": [f"{domain}/q_13/image_1.png"],
            **base,
        },
        {
            "id": "14",
            "query": "Text-only question about figures",
            "gold_ids": [f"{domain}/a7beca61_3.txt"],
            "image_paths": [],
            **base,
        },
    ]
    multimodal = [
        {
            **row,
            "positive_images": [{"image_path": f"{domain}/{domain}_a7beca61_0001/image_1.webp"}],
            "negative_images": [],
        }
        for row in examples
    ]
    images = [{"path": f"{domain}/q_12/image_1.png", "bytes": _png(0)}]  # q_13's image is missing
    tables = {
        "documents": ([{"id": d, "content": c} for d, c in docs.items()], f"{domain}-00000-of-00001.parquet"),
        "examples": (examples, f"{domain}-00000-of-00001.parquet"),
        "examples_multimodal": (multimodal, f"{domain}.parquet"),
        "examples_images": (images, f"{domain}-00000-of-00001.parquet"),
    }
    for config, (rows, name) in tables.items():
        (raw / config).mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(raw / config / name)
    return raw
