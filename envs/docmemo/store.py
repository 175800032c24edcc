"""Per-document schema memory for DocMemo: page text, summaries, page types, sections, embeddings, images.

On-disk layout of one document store (written by ``ragym.data_prep.mmlongbench_doc``)::

    <store_root>/<doc_key>/meta.json        {"doc_id", "num_pages", "encoder", "dpi", "sections": [...]}
    <store_root>/<doc_key>/pages.jsonl      one {"page", "text", "summary", "type"} per page (page 1-based)
    <store_root>/<doc_key>/embeddings.npy   (num_pages, dim) float32, L2-normalised, from ``encoder``
    <store_root>/<doc_key>/images/page_0001.png ...

``load_store`` caches by resolved path, so constructing many envs over the same store is cheap.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragym.envs.files import read_jsonl
from ragym.envs.image_cache import decode_image

PAGE_TYPES = ("text", "table", "chart", "image-heavy")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_STORES: dict[str, DocStore] = {}


@dataclass(frozen=True)
class Section:
    """One entry of a document's outline (PDF bookmarks)."""

    title: str
    """Section title as written in the outline."""
    level: int
    """Nesting depth, 0 for top-level sections."""
    page: int
    """1-based page the section starts on."""


@dataclass(frozen=True)
class DocStore:
    """Everything DocMemo knows about one document before any question is asked."""

    doc_id: str
    """The benchmark's document id (the PDF file name for MMLongBench-Doc)."""
    texts: tuple[str, ...]
    """Extracted text of each page (0-based index = page number - 1)."""
    summaries: tuple[str, ...]
    """Short extractive summary of each page, shown to the policy with candidates."""
    page_types: tuple[str, ...]
    """One of ``PAGE_TYPES`` per page."""
    embeddings: np.ndarray
    """(num_pages, dim) float32 L2-normalised page embeddings."""
    encoder: str
    """Name of the encoder that produced ``embeddings`` (queries must use the same one)."""
    sections: tuple[Section, ...] = ()
    """Document outline where the PDF has one, else empty."""
    image_paths: tuple[str, ...] = ()
    """Rendered page images on disk (empty when ``images`` holds them in memory)."""
    images: tuple[np.ndarray, ...] = field(default=(), repr=False)
    """In-memory page images (the built-in synthetic document), uint8 (H, W, 3)."""

    def __post_init__(self) -> None:
        n = len(self.texts)
        lengths = {len(self.summaries), len(self.page_types), self.embeddings.shape[0]}
        if n == 0:
            raise ValueError(f"document {self.doc_id!r} has no pages")
        if lengths != {n}:
            raise ValueError(f"document {self.doc_id!r}: per-page fields disagree on the page count")
        if len(self.image_paths) not in (0, n) or len(self.images) not in (0, n):
            raise ValueError(f"document {self.doc_id!r}: page images do not match the page count {n}")
        bad = set(self.page_types) - set(PAGE_TYPES)
        if bad:
            raise ValueError(f"document {self.doc_id!r}: unknown page types {sorted(bad)}")

    @property
    def num_pages(self) -> int:
        """Number of pages."""
        return len(self.texts)

    def page_image(self, index: int) -> np.ndarray:
        """Page ``index`` (0-based) as uint8 (H, W, 3); a blank page when the store has no images."""
        if self.images:
            return self.images[index]
        if self.image_paths:
            return decode_image(self.image_paths[index])
        return np.full((32, 24, 3), 255, dtype=np.uint8)

    def schema_text(self, max_sections: int) -> str:
        """The query-independent schema memory as the policy reads it."""
        counts = {t: self.page_types.count(t) for t in PAGE_TYPES if t in self.page_types}
        kinds = ", ".join(f"{n} {t}" for t, n in counts.items())
        lines = [f"Document: {self.num_pages} pages ({kinds})."]
        if self.sections:
            shown = self.sections[:max_sections]
            lines.append("Sections: " + "; ".join(f"{s.title} (p{s.page})" for s in shown))
        return "\n".join(lines)


def summarise(text: str, max_chars: int) -> str:
    """Deterministic extractive summary: the leading sentences of the page that fit in ``max_chars``."""
    flat = " ".join(text.split())
    if len(flat) <= max_chars:
        return flat
    out = ""
    for sentence in _SENTENCE_END.split(flat):
        if len(out) + len(sentence) + 1 > max_chars:
            break
        out = f"{out} {sentence}".strip()
    # A first sentence longer than the budget is cut at a word boundary instead of being lost.
    return out or flat[:max_chars].rsplit(" ", 1)[0]


def save_store(store: DocStore, directory: str | Path, dpi: int) -> Path:
    """Write ``store`` (without in-memory images) in the on-disk layout above."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sections = [{"title": s.title, "level": s.level, "page": s.page} for s in store.sections]
    meta = {"doc_id": store.doc_id, "num_pages": store.num_pages, "encoder": store.encoder, "dpi": dpi}
    (directory / "meta.json").write_text(json.dumps({**meta, "sections": sections}, indent=1))
    with open(directory / "pages.jsonl", "w", encoding="utf-8") as f:
        for i in range(store.num_pages):
            row = {
                "page": i + 1,
                "text": store.texts[i],
                "summary": store.summaries[i],
                "type": store.page_types[i],
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    np.save(directory / "embeddings.npy", store.embeddings.astype(np.float32))
    return directory


def load_store(directory: str | Path) -> DocStore:
    """Read a store written by ``save_store``; cached per resolved path."""
    key = str(Path(directory).resolve())
    if key not in _STORES:
        _STORES[key] = _read_store(Path(key))
    return _STORES[key]


def _read_store(directory: Path) -> DocStore:
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"no DocMemo document store at {directory} (missing meta.json)")
    meta = json.loads(meta_path.read_text())
    rows = [row for _, row in read_jsonl(directory / "pages.jsonl")]
    if [r["page"] for r in rows] != list(range(1, meta["num_pages"] + 1)):
        raise ValueError(f"{directory / 'pages.jsonl'}: pages are not 1..{meta['num_pages']} in order")
    images = tuple(str(directory / "images" / f"page_{r['page']:04d}.png") for r in rows)
    missing = [p for p in images if not Path(p).is_file()]
    if missing and len(missing) < len(images):
        raise FileNotFoundError(f"{directory}: {len(missing)} page images missing, first {missing[0]}")
    return DocStore(
        doc_id=meta["doc_id"],
        texts=tuple(r["text"] for r in rows),
        summaries=tuple(r["summary"] for r in rows),
        page_types=tuple(r["type"] for r in rows),
        embeddings=np.load(directory / "embeddings.npy"),
        encoder=meta["encoder"],
        sections=tuple(Section(**s) for s in meta["sections"]),
        image_paths=() if missing else images,
    )


def doc_key(doc_id: str) -> str:
    """Folder name of a document's store: the id without a ``.pdf`` suffix, path separators replaced."""
    stem = doc_id[:-4] if doc_id.lower().endswith(".pdf") else doc_id
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem)
