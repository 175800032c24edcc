"""Read Stack Exchange question/answer pairs from a data-dump ``Posts.xml`` or the Skeptics jsonl format.

Every input row (a question post, or a jsonl line) comes out either as a ``QAPair`` or as a ``Rejection``
with a reason, so the caller can check rows in = rows out + rows rejected.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from ragym.envs.files import JsonlError, read_jsonl


@dataclass(frozen=True)
class QAPair:
    """One thread: a question with its accepted (or best-scored) answer."""

    site: str
    """Stack Exchange site, e.g. ``skeptics``."""
    question_id: str
    """Post id of the question (the thread id)."""
    question: str
    """Question title, followed by its body when the source has one."""
    answer_id: str
    """Post id of the chosen answer."""
    answer: str
    """Plain text of the chosen answer."""
    question_date: str | None
    """ISO creation date of the question; None when the source has no dates."""
    answer_date: str | None
    """ISO creation date of the answer; None when the source has no dates."""
    category: str | None = None
    """Source category when the source has one (Skeptics jsonl), else None."""


@dataclass(frozen=True)
class Rejection:
    """An input row that produced no pair, with where it came from and why."""

    row: str
    """``file:line`` or ``file:post-id`` of the rejected row."""
    reason: str
    """Short machine-readable cause, counted in the report."""


class _TextOnly(HTMLParser):
    """Collects the text of an HTML fragment (post bodies are HTML in the dumps)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_to_text(fragment: str) -> str:
    """Plain text of an HTML fragment with whitespace runs collapsed."""
    parser = _TextOnly()
    parser.feed(fragment)
    parser.close()
    return re.sub(r"\s+", " ", "".join(parser.parts)).strip()


def site_from_path(path: Path) -> str:
    """Site name from a dump folder such as ``skeptics.stackexchange.com/Posts.xml``."""
    return path.resolve().parent.name.split(".")[0]


def read_posts_xml(path: Path, site: str | None = None) -> Iterator[QAPair | Rejection]:
    """Pairs from a data-dump ``Posts.xml``: one item per question post (answers are attached, not counted)."""
    site = site or site_from_path(path)
    questions: list[tuple[int, dict[str, str]]] = []  # (position among the file's rows, attributes)
    answers: dict[str, list[dict[str, str]]] = {}
    position = 0
    for _, elem in ET.iterparse(path, events=("end",)):
        if elem.tag != "row":
            continue
        position += 1
        attrs = dict(elem.attrib)
        elem.clear()  # the full dump is large; keep only the attributes we copied
        if attrs.get("PostTypeId") == "1":
            questions.append((position, attrs))
        elif attrs.get("PostTypeId") == "2" and "ParentId" in attrs:
            answers.setdefault(attrs["ParentId"], []).append(attrs)
    for position, q in questions:
        qid = q.get("Id")
        if not qid:
            yield Rejection(f"{path}:row {position}", "missing_field:Id")
            continue
        yield _pair_from_posts(path, site, qid, q, answers.get(qid, []))


def _best_answer(question: dict[str, str], candidates: list[dict[str, str]]) -> dict[str, str] | None:
    """The accepted answer, else the highest-scored one (ties broken by the lower post id); ValueError when an
    answer to rank has an Id or Score that is not an integer."""
    accepted = question.get("AcceptedAnswerId")
    for answer in candidates:
        if accepted is not None and answer.get("Id") == accepted:
            return answer
    if not candidates:
        return None
    return max(candidates, key=lambda a: (int(a.get("Score", "0")), -int(a.get("Id", ""))))


def _pair_from_posts(
    path: Path, site: str, qid: str, question: dict[str, str], candidates: list[dict[str, str]]
) -> QAPair | Rejection:
    try:
        answer = _best_answer(question, candidates)
    except ValueError:
        return Rejection(f"{path}:{qid}", "unrankable_answers")
    if answer is None:
        return Rejection(f"{path}:{qid}", "no_answer")
    title = html_to_text(question.get("Title", ""))
    body = html_to_text(question.get("Body", ""))
    text = f"{title}\n{body}".strip()
    answer_text = html_to_text(answer.get("Body", ""))
    if not text or not answer_text:
        return Rejection(f"{path}:{qid}", "empty_text")
    return QAPair(
        site=site,
        question_id=qid,
        question=text,
        answer_id=answer["Id"],
        answer=answer_text,
        question_date=question.get("CreationDate"),
        answer_date=answer.get("CreationDate"),
    )


_JSONL_FIELDS = ("question", "questionId", "answer", "answerId")


def read_skeptics_jsonl(path: Path, site: str = "skeptics") -> Iterator[QAPair | Rejection]:
    """Pairs from the Skeptics jsonl format (one question/answer pair per line; no dates in this source)."""
    for line_no, row in read_jsonl(path, yield_broken=True):
        where = f"{path}:{line_no}"
        if isinstance(row, JsonlError):
            yield Rejection(where, "bad_json")
            continue
        # A null field is missing too: str(None) would train on the text "None" (or file a thread under it).
        missing = [name for name in _JSONL_FIELDS if not isinstance(row, dict) or row.get(name) is None]
        if missing:
            yield Rejection(where, f"missing_field:{missing[0]}")
            continue
        question, answer = str(row["question"]).strip(), str(row["answer"]).strip()
        if not question or not answer:
            yield Rejection(where, "empty_text")
            continue
        yield QAPair(
            site=site,
            question_id=str(row["questionId"]),
            question=question,
            answer_id=str(row["answerId"]),
            answer=answer,
            question_date=row.get("questionDate"),
            answer_date=row.get("answerDate"),
            category=row.get("category"),
        )


INPUT_SUFFIXES = (".xml", ".jsonl")
"""The file types ``read_pairs`` reads: a data-dump ``Posts.xml``, the Skeptics jsonl."""


def read_pairs(path: Path, site: str | None = None) -> Iterator[QAPair | Rejection]:
    """Dispatch on the file type: ``*.xml`` is a data dump, ``*.jsonl`` the Skeptics format."""
    if path.suffix == ".xml":
        return read_posts_xml(path, site)
    if path.suffix == ".jsonl":
        return read_skeptics_jsonl(path, site or "skeptics")
    raise ValueError(f"{path}: unsupported input (expected Posts.xml or a .jsonl file)")
