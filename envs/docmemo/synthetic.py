"""The built-in synthetic long document for ``DocMemo-v0`` without data: a deterministic annual report.

Every regional page states one figure, so each question has known gold pages; some questions need two
pages (a comparison) and one asks about a region the report never covers (not answerable). Page images
are rendered text, so the env's image path is exercised without any PDF.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from ragym.envs.docmemo.store import DocStore, Section, summarise
from ragym.envs.retrieval.page_encoders import PageEncoder

REGIONS = ("Northern", "Coastal", "Highland", "Eastern", "Valley", "Lakeside", "Southern", "Harbour")
PRODUCTS = ("barley", "timber", "wool", "copper", "salt", "honey", "flax", "granite")
SUMMARY_CHARS = 160
_PAGE_SIZE = (240, 320)  # (width, height) of the rendered synthetic page images
_STORES: dict[str, DocStore] = {}


@dataclass(frozen=True)
class SyntheticQuestion:
    """A question over the synthetic report with its gold annotation (never shown to the policy)."""

    question: str
    answer: str
    answer_format: str
    evidence_pages: tuple[int, ...]
    """1-based gold pages; empty for the not-answerable question."""


def _tonnes(region_index: int) -> int:
    return 1200 + 137 * region_index


def _pages() -> tuple[list[str], list[str], list[Section]]:
    texts = [
        "Annual Report of the Meridian Cooperative. This report reviews the year's operations by region.",
        "Contents. Overview, regional operations, finance tables, outlook.",
    ]
    types = ["text", "text"]
    sections = [Section("Overview", 0, 1), Section("Regional operations", 0, 3)]
    for i, (region, product) in enumerate(zip(REGIONS, PRODUCTS, strict=True)):
        texts.append(
            f"The {region} division specialises in {product}. It employs {40 + 3 * i} members "
            f"and runs {2 + i % 3} depots along the main road."
        )
        texts.append(
            f"In the reporting year the {region} division shipped {_tonnes(i)} tonnes of {product}. "
            f"Shipments rose in spring and fell after the autumn storms."
        )
        types += ["text", "text"]
    sections.append(Section("Finance", 0, len(texts) + 1))
    texts.append(
        "Finance table. Region | Revenue | Cost. "
        + " ".join(f"{r} | {900 + 50 * i} | {700 + 30 * i}." for i, r in enumerate(REGIONS))
    )
    types.append("table")
    sections.append(Section("Outlook", 0, len(texts) + 1))
    texts.append("Outlook. The board expects steady demand and plans a new warehouse next year.")
    types.append("text")
    return texts, types, sections


def synthetic_questions() -> tuple[SyntheticQuestion, ...]:
    """Every question the synthetic report supports, with gold pages and answers."""
    out = []
    for i, (region, product) in enumerate(zip(REGIONS, PRODUCTS, strict=True)):
        page = 3 + 2 * i + 1  # the shipment page follows the division's profile page
        out.append(
            SyntheticQuestion(
                f"How many tonnes of {product} did the {region} division ship?",
                str(_tonnes(i)),
                "Int",
                (page,),
            )
        )
    out.append(
        SyntheticQuestion(
            f"How many more tonnes did the {REGIONS[1]} division ship than the {REGIONS[0]} division?",
            str(_tonnes(1) - _tonnes(0)),
            "Int",
            (4, 6),
        )
    )
    out.append(
        SyntheticQuestion(
            "How many tonnes of tea did the Desert division ship?", "Not answerable", "None", ()
        )
    )
    return tuple(out)


def _render(text: str) -> np.ndarray:
    image = Image.new("RGB", _PAGE_SIZE, "white")
    draw = ImageDraw.Draw(image)
    words, line, y = text.split(), "", 8
    for word in words:
        if len(line) + len(word) > 36:
            draw.text((8, y), line, fill="black")
            line, y = "", y + 14
        line = f"{line} {word}".strip()
    draw.text((8, y), line, fill="black")
    return np.asarray(image, dtype=np.uint8)


def synthetic_store(encoder: PageEncoder) -> DocStore:
    """The synthetic report embedded by ``encoder``; built once per encoder name."""
    if encoder.name not in _STORES:
        texts, types, sections = _pages()
        images = tuple(_render(t) for t in texts)
        _STORES[encoder.name] = DocStore(
            doc_id="synthetic_annual_report",
            texts=tuple(texts),
            summaries=tuple(summarise(t, SUMMARY_CHARS) for t in texts),
            page_types=tuple(types),
            embeddings=encoder.encode_pages(texts, images),
            encoder=encoder.name,
            sections=tuple(sections),
            images=images,
        )
    return _STORES[encoder.name]
