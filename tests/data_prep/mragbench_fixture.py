"""A tiny MRAG-Bench in the hub layout (``data/test-00000-of-00001.parquet``) with real photos from skimage.

Same columns and feature types as ``uclanlp/MRAG-Bench`` (image cells ``{"bytes", "path"}``, image lists),
written with ``datasets`` so the parquet carries the same Hugging Face feature metadata. Rows 0-7 are
valid; rows 8-12 are each broken in one way (the reason ``ragym.data_prep.mragbench`` must report).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "colorwheel",
    "camera",
    "coins",
    "moon",
    "brick",
    "grass",
    "gravel",
    "clock",
    "page",
    "text",
)
SCENARIOS = (
    "Angle",
    "Partial",
    "Scope",
    "Obstruction",
    "Temporal",
    "Deformation",
    "Incomplete",
    "Biological",
)
BROKEN = {
    8: "bad_answer_choice",
    9: "bad_query_image",
    10: "no_gt_images",
    11: "missing_field",
    12: "duplicate_id",
}
"""Row index -> the rejection reason it must get."""
NUM_VALID = 8


def photo(name: str, crop: int, size: int = 48) -> bytes:
    """JPEG bytes of an skimage photo, cropped at one of four offsets and downscaled (fast tests)."""
    import skimage.data

    pixels = np.asarray(getattr(skimage.data, name)())
    if pixels.ndim == 2:
        pixels = np.stack([pixels] * 3, axis=-1)
    h, w = pixels.shape[:2]
    top, left = (crop // 2) * h // 4, (crop % 2) * w // 4
    image = Image.fromarray(pixels[top : top + 3 * h // 4, left : left + 3 * w // 4, :3]).resize((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _cell(data: bytes) -> dict[str, Any]:
    return {"bytes": data, "path": None}


def records() -> list[dict[str, Any]]:
    """The 13 fixture questions; question i's gold images are crops of the photo its query shows."""
    out = []
    for i in range(13):
        name = PHOTOS[i % len(PHOTOS)]
        other = PHOTOS[(i + 5) % len(PHOTOS)]
        gold = [_cell(photo(name, 1)), _cell(photo(name, 2))]
        retrieved = [gold[0], _cell(photo(other, 3))]  # MRAG's CLIP list often holds a gt image too
        out.append(
            {
                "id": str(100 + i),
                "aspect": "Perspective" if i % 2 else "Transformative",
                "scenario": SCENARIOS[i % len(SCENARIOS)],
                "image": _cell(photo(name, 0)),
                "gt_images": gold,
                "question": f"Which photo is shown in the query image ({i})?",
                "A": name,
                "B": other,
                "C": f"{name} at night",
                "D": "none of these",
                "answer_choice": "A",
                "answer": name,
                "image_type": "photo",
                "source": "skimage",
                "retrieved_images": retrieved,
            }
        )
    out[8]["answer_choice"] = "E"
    out[9]["image"] = _cell(b"not an image")
    out[10]["gt_images"] = []
    out[11]["question"] = ""
    out[12]["id"] = out[3]["id"]
    return out


def write_fixture(raw: Path, rows: list[dict[str, Any]] | None = None) -> Path:
    """Write the fixture (or ``rows`` in its shape) under ``raw`` in the hub layout and return ``raw``."""
    from datasets import Dataset, Features, List, Value
    from datasets import Image as ImageFeature

    strings = (
        "id",
        "aspect",
        "scenario",
        "question",
        "A",
        "B",
        "C",
        "D",
        "answer_choice",
        "answer",
        "image_type",
        "source",
    )
    features = Features(
        {
            **{k: Value("string") for k in strings},
            "image": ImageFeature(),
            "gt_images": List(ImageFeature()),
            "retrieved_images": List(ImageFeature()),
        }
    )
    rows = records() if rows is None else rows
    ds = Dataset.from_dict({k: [r[k] for r in rows] for k in features}, features=features)
    (raw / "data").mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(raw / "data" / "test-00000-of-00001.parquet"))
    (raw / "README.md").write_text(
        "---\nlicense: cc-by-4.0\n---\nFixture in the layout of uclanlp/MRAG-Bench.\n"
    )
    return raw
