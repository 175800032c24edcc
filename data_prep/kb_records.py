"""Shared records of the real KB-VQA readers: KB articles, samples and passage chunking.

Every reader (``ragym.data_prep.infoseek``, ``ragym.data_prep.evqa``, ``ragym.data_prep.mmhops``) turns the official files
into ``Article`` and ``Sample`` records and records each row it cannot use in a ``ragym.data_prep.report.PrepReport`` with a reason,
so a run always accounts for every input row: rows in = rows out + rows rejected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASSAGE_CHARS = 800
"""Paper (4.1.2, C.1): Wikipedia text is indexed in chunks of 800 characters."""


class RowError(ValueError):
    """A row that cannot be used; ``reason`` is the report's key, the message names the row."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class Article:
    """One KB entry: a stable key, its title, its text, and where its reference image comes from."""

    key: str
    """The dataset's KB key (Wikidata QID for Wiki6M, Wikipedia URL for E-VQA-format KBs, entity id for MMhops)."""
    title: str
    """Entity name shown with each candidate."""
    text: str
    """Article text, chunked into passages."""
    image_url: str | None = None
    """URL of the reference image (fetched by ``ragym prep kb-images``); None when the KB lists none."""
    image_path: str | None = None
    """Local reference image, when the KB ships one (MMhops) or kb-images already fetched it."""
    qid: str | None = None
    """Wikidata id of the entity where the KB carries one (Wiki6M ``wikidata_id``): InfoSeek golds match on it."""


@dataclass(frozen=True)
class Sample:
    """One question: its query images, gold entities (one per image) and the ground truth the reward reads."""

    sample_id: str
    """The dataset's own row id."""
    split: str
    """Official split name (``train``, ``val``, ``test``, ``validation``)."""
    question: str
    """Question text shown to the policy."""
    images: tuple[Any, ...]
    """One entry per query image: a local path (str) or encoded bytes (MMhops parquet cells)."""
    gold_keys: tuple[str | None, ...]
    """KB key of the gold entity of each image (None where the dataset does not give one)."""
    ground_truth: dict[str, Any]
    """The annotation in the form ``ragym.rewards.answers.score_answer`` reads for this data source."""
    question_type: str
    """The dataset's question type (String/Numerical/Time, templated/2_hop/..., Bridge/Compare)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Dataset fields worth keeping in the row (e.g. InfoSeek's data_split for the harmonic mean); a reader
    that cannot name a gold entity puts the reason under ``gold_missing`` (training rows are then rejected)."""


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def chunk_text(text: str, max_chars: int = PASSAGE_CHARS) -> list[str]:
    """Split ``text`` into chunks of at most ``max_chars``, on sentence boundaries where possible.

    Sentences are packed greedily; a sentence longer than ``max_chars`` is cut at the last space before
    the limit (or hard at the limit when it has none).

    >>> chunk_text("One. Two two. Three three three.", max_chars=14)
    ['One. Two two.', 'Three three', 'three.']
    """
    chunks: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(" ".join(text.split())):
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 0, max_chars + 1)
            cut = cut if cut > 0 else max_chars
            if current:
                chunks.append(current)
                current = ""
            chunks.append(sentence[:cut].rstrip())
            sentence = sentence[cut:].lstrip()
        if not sentence:
            continue
        if current and len(current) + 1 + len(sentence) > max_chars:
            chunks.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}" if current else sentence
    if current:
        chunks.append(current)
    return chunks


def require_str(row: dict[str, Any], key: str, row_name: str) -> str:
    """``row[key]`` as a non-empty string, else a ``RowError`` naming the field."""
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"missing_{key}", f"{row_name} has no usable {key!r} (got {value!r})")
    return value


class _Stream:
    """A growing text buffer over a file, for incremental JSON parsing."""

    def __init__(self, handle: Any, chunk_chars: int):
        self.handle, self.chunk_chars, self.buffer, self.pos = handle, chunk_chars, "", 0

    def fill(self) -> bool:
        more = self.handle.read(self.chunk_chars)
        self.buffer, self.pos = self.buffer[self.pos :] + more, 0
        return bool(more)

    def peek(self) -> str:
        """The next non-space character ('' at the end of the file), not consumed."""
        while True:
            while self.pos < len(self.buffer) and self.buffer[self.pos].isspace():
                self.pos += 1
            if self.pos < len(self.buffer) or not self.fill():
                return self.buffer[self.pos : self.pos + 1]

    def value(self, decoder: json.JSONDecoder) -> Any:
        """The next JSON value, reading more of the file until it is complete."""
        self.peek()
        while True:
            try:
                parsed, end = decoder.raw_decode(self.buffer, self.pos)
                # A number is complete only once a delimiter follows it ("-2." may be "-2.5e3").
                if end < len(self.buffer) and self.buffer[end] in ",:]} \t\r\n":
                    self.pos = end
                    return parsed
            except json.JSONDecodeError:
                pass
            if not self.fill():
                try:
                    parsed, self.pos = decoder.raw_decode(self.buffer, self.pos)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{self.handle.name}: malformed JSON value ({err.msg})") from err
                return parsed


def iter_json_object(path: Path, chunk_chars: int = 1 << 20) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` of a file holding one JSON object, read incrementally: the 2M-article E-VQA KB is too
    big to ``json.load`` on most machines. Malformed JSON is a ``ValueError`` naming the file.
    """
    decoder = json.JSONDecoder()
    with path.open(encoding="utf-8-sig") as handle:  # -sig: a file re-saved with a BOM reads the same
        stream = _Stream(handle, chunk_chars)

        def expect(chars: str) -> str:
            char = stream.peek()
            if not char or char not in chars:
                raise ValueError(
                    f"{path}: expected one of {chars!r}, found {char or 'the end of the file'!r}"
                )
            stream.pos += 1
            return char

        expect("{")
        if stream.peek() == "}":
            return
        while True:
            if stream.peek() != '"':
                raise ValueError(f"{path}: expected a string key, found {stream.peek()!r}")
            key = stream.value(decoder)
            expect(":")
            yield key, stream.value(decoder)
            if expect(",}") == "}":
                return
