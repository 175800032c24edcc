"""Read a PDF page by page with pypdfium2: rendered image, text layer, layout features, page type, outline.

Page types come from cheap layout features, not a model: the share of the page covered by raster images,
the number of vector path objects (chart marks and axes), and the share of numeric tokens (tables).
The thresholds are ``PageTypeRules`` fields; they are heuristics, checked against the ``evidence_sources`` labels of the six shared MMLongBench-Doc documents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw

from ragym.envs.docmemo.store import Section

_NUMBER = re.compile(r"^[\$€£(]?[-+]?\d[\d,.]*%?\)?$")


@dataclass(frozen=True)
class PageTypeRules:
    """Thresholds that map layout features to a page type (first matching rule wins, in field order)."""

    image_heavy_area: float = 0.35
    """Raster images covering at least this share of the page ..."""
    image_heavy_max_chars: int = 600
    """... with at most this many text characters make an ``image-heavy`` page."""
    table_min_numbers: int = 30
    """At least this many numeric tokens ..."""
    table_numeric_share: float = 0.12
    """... making up at least this share of all tokens make a ``table`` page."""
    chart_min_paths: int = 60
    """At least this many vector path objects make a ``chart`` page (bars, lines, axes, ticks)."""


@dataclass(frozen=True)
class PdfPage:
    """One page as data prep needs it."""

    image: np.ndarray
    """Rendered page, uint8 (H, W, 3)."""
    text: str
    """Text layer (empty for scanned pages)."""
    image_area: float
    """Share of the page covered by raster image objects (overlaps counted twice, capped at 1)."""
    num_paths: int
    """Number of vector path objects."""
    num_numbers: int
    """Numeric tokens in the text layer."""
    num_tokens: int
    """Whitespace tokens in the text layer."""


def classify_page(page: PdfPage, rules: PageTypeRules) -> str:
    """``text``, ``table``, ``chart`` or ``image-heavy`` by ``rules``."""
    if page.image_area >= rules.image_heavy_area and len(page.text.strip()) <= rules.image_heavy_max_chars:
        return "image-heavy"
    share = page.num_numbers / max(page.num_tokens, 1)
    if page.num_numbers >= rules.table_min_numbers and share >= rules.table_numeric_share:
        return "table"
    # Ruled tables also draw many paths, so the chart rule only applies to pages that are not numeric grids.
    if page.num_paths >= rules.chart_min_paths:
        return "chart"
    return "text"


def _layout(page: pdfium.PdfPage) -> tuple[float, int]:
    width, height = page.get_size()
    image_area, num_paths = 0.0, 0
    for obj in page.get_objects(max_depth=2):
        # pypdfium2 sets PdfObject.type in __new__, where static tools do not look for attributes.
        if obj.type == pdfium_raw.FPDF_PAGEOBJ_IMAGE:  # pyright: ignore[reportAttributeAccessIssue]
            left, bottom, right, top = obj.get_bounds()
            image_area += max(0.0, right - left) * max(0.0, top - bottom)
        elif obj.type == pdfium_raw.FPDF_PAGEOBJ_PATH:  # pyright: ignore[reportAttributeAccessIssue]
            num_paths += 1
    return min(1.0, image_area / max(width * height, 1.0)), num_paths


def read_pdf(path: str | Path, dpi: int) -> list[PdfPage]:
    """Every page of ``path`` rendered at ``dpi``; a broken PDF raises naming the file."""
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as err:
        raise ValueError(f"{path}: not a readable PDF ({err})") from err
    pages = []
    try:
        for index in range(len(pdf)):
            try:
                pages.append(_read_page(pdf, index, dpi))
            except pdfium.PdfiumError as err:
                # The file opens but this page does not: the document cannot be served whole.
                raise UnreadablePage(f"{path}: page {index + 1} cannot be read ({err})") from err
    finally:
        pdf.close()
    return pages


class UnreadablePage(ValueError):
    """A PDF that opens but has a page pdfium cannot load, read or render."""


def _read_page(pdf: pdfium.PdfDocument, index: int, dpi: int) -> PdfPage:
    page = pdf[index]
    text = page.get_textpage().get_text_range()
    tokens = text.split()
    image_area, num_paths = _layout(page)
    # render's scale is a float (pypdfium2's docs); unannotated, its default 1 reads as int to pyright.
    bitmap = page.render(scale=dpi / 72.0).to_pil().convert("RGB")  # pyright: ignore[reportArgumentType]
    return PdfPage(
        np.asarray(bitmap, dtype=np.uint8),
        text,
        image_area,
        num_paths,
        sum(1 for t in tokens if _NUMBER.match(t)),
        len(tokens),
    )


def read_outline(path: str | Path) -> tuple[Section, ...]:
    """The PDF's bookmarks as sections (1-based start pages); empty when the PDF has none."""
    pdf = pdfium.PdfDocument(str(path))
    try:
        sections = []
        for item in pdf.get_toc():
            dest = item.get_dest()
            index = dest.get_index() if dest is not None else None
            if index is not None:
                sections.append(Section(item.get_title().strip(), item.level, index + 1))
        return tuple(sections)
    except pdfium.PdfiumError as err:
        raise ValueError(f"{path}: outline cannot be read ({err})") from err
    finally:
        pdf.close()
