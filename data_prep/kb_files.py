"""Readers of the Wikipedia KB files the three benchmarks ship, into ``Article`` records (by field name).

Formats (``../shared/DATASETS.md`` 1c, 1d, 2b):

- Wiki6M JSON Lines (``Wiki6M_ver_1_0.jsonl[.gz]`` or a subset of it): ``wikidata_id``, ``wikipedia_title``,
  ``wikipedia_content`` (``wikipedia_summary`` when content is empty), ``wikipedia_image_url`` (may be null).
- E-VQA JSON: one object ``{wikipedia_url: {title, section_titles, section_texts, image_urls, ...}}``
  (``encyclopedic_kb_wiki.json``, EchoSight's InfoSeek 100K KB).
- JSON Lines of ``{wikipedia_url: entry}`` (mKG-RAG's ``wiki_100_dict_v4.jsonl``), entries as above.
- One JSON object ``{key: {"wikipedia_title"/"title", "wikipedia_content", ...}}`` (ReflectiVA's 100K KB).

An article's Wikidata id (``Article.qid``) is its ``wikidata_id`` field in any format, or a key that is a QID.
A KB entry that cannot be used is rejected under split ``kb`` with a reason, like any row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragym.data_prep.kb_records import Article, RowError, iter_json_object
from ragym.data_prep.report import PrepReport, UnreadableFile
from ragym.envs.files import read_jsonl

_QID = re.compile(r"Q[1-9]\d*")


def _qid(key: str, entry: dict[str, Any]) -> str | None:
    """The entry's Wikidata id: its ``wikidata_id`` field, else a key that is one (Wiki6M rows), else None."""
    value = entry.get("wikidata_id")
    if isinstance(value, str) and _QID.fullmatch(value.strip()):
        return value.strip()
    return key if _QID.fullmatch(key) else None


def _evqa_entry(key: str, entry: Any) -> Article:
    """An E-VQA-format entry: text = its sections in order, reference image = its first image URL."""
    if not isinstance(entry, dict):
        raise RowError("malformed_kb_entry", f"KB entry {key!r} is not an object")
    title = entry.get("title")
    texts = entry.get("section_texts")
    if not isinstance(title, str) or not title.strip():
        raise RowError("kb_entry_without_title", f"KB entry {key!r} has no title")
    if not isinstance(texts, list) or not any(isinstance(t, str) and t.strip() for t in texts):
        raise RowError("kb_entry_without_text", f"KB entry {key!r} has no section_texts")
    urls = [u for u in entry.get("image_urls") or [] if isinstance(u, str) and u]
    text = "\n\n".join(t for t in texts if isinstance(t, str))
    return Article(key=key, title=title, text=text, image_url=urls[0] if urls else None, qid=_qid(key, entry))


def _wiki6m_entry(key: str, entry: Any) -> Article:
    """A Wiki6M-format entry (``wikipedia_title``/``title`` and ``wikipedia_content``/``wikipedia_summary``)."""
    if not isinstance(entry, dict):
        raise RowError("malformed_kb_entry", f"KB entry {key!r} is not an object")
    title = entry.get("wikipedia_title") or entry.get("title")
    text = entry.get("wikipedia_content") or entry.get("wikipedia_summary")
    if not isinstance(title, str) or not title.strip():
        raise RowError("kb_entry_without_title", f"KB entry {key!r} has no wikipedia_title")
    if not isinstance(text, str) or not text.strip():
        raise RowError("kb_entry_without_text", f"KB entry {key!r} has no wikipedia_content or summary")
    url = entry.get("wikipedia_image_url")
    image_url = url if isinstance(url, str) and url else None
    return Article(key=key, title=title, text=text, image_url=image_url, qid=_qid(key, entry))


def _entry(key: str, entry: Any) -> Article:
    if isinstance(entry, dict) and "section_texts" in entry:
        return _evqa_entry(key, entry)
    return _wiki6m_entry(key, entry)


def _jsonl_entries(path: Path) -> Iterator[tuple[str, Any]]:
    for number, obj in read_jsonl(path, yield_broken=True):
        where = f"{path.name}:{number}"
        if isinstance(obj, Exception):
            yield where, RowError("malformed_json", f"{where}: {obj}")
        elif isinstance(obj, dict) and "wikidata_id" in obj:
            yield str(obj["wikidata_id"]), obj
        elif isinstance(obj, dict) and len(obj) == 1:
            yield next(iter(obj.items()))
        else:
            yield where, RowError("malformed_kb_entry", f"{where}: neither a Wiki6M row nor {{url: entry}}")


def _json_entries(path: Path) -> Iterator[tuple[str, Any]]:
    """The entries of a one-object KB file; ``UnreadableFile`` naming it when it is cut short (a download that
    stopped) or not one JSON object: past the break nothing can be read, so nothing is built on part of it."""
    try:
        yield from iter_json_object(path)  # streamed: the 2M-article E-VQA KB does not fit json.load
    except ValueError as err:  # malformed JSON (named by iter_json_object) or a byte that is not UTF-8
        message = str(err) if str(path) in str(err) else f"{path}: {err}"
        raise UnreadableFile(f"{message}; the file is cut short or is not one JSON object") from err


def read_kb_file(path: Path, report: PrepReport) -> list[Article]:
    """Every usable article of one KB file, in file order; rejects are counted in ``report`` (split ``kb``)."""
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        entries: Iterator[tuple[str, Any]] = _jsonl_entries(path)
    else:
        entries = _json_entries(path)
    articles, seen = [], set()
    for key, entry in entries:
        report.read("kb")
        try:
            if isinstance(entry, RowError):
                raise entry
            if key in seen:
                raise RowError("duplicate_kb_key", f"{path.name}: key {key!r} appears again")
            article = _entry(str(key), entry)
        except RowError as err:
            report.reject("kb", err.reason, str(err))
            continue
        seen.add(key)
        articles.append(article)
        report.keep("kb")
    return articles
