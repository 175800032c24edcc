"""DocMemo typed actions and the one parser that turns a policy turn into an action (or a ``ParseError``).

Grammar of one turn (whitespace between blocks is allowed, other text outside blocks is not)::

    turn    := "<reason>" TEXT "</reason>" action
    action  := "<select>" PAGES "</select>"                       # pick pages from the candidates
             | "<refine>" "<query>" TEXT "</query>"               # next round's query (required)
                          ["<note>" TEXT "</note>"]               # what is still missing
                          ["<useful>" PAGES? "</useful>"]         # pages whose content helped
                          ["<irrelevant>" PAGES? "</irrelevant>"] # pages that did not
               "</refine>"
             | "<answer>" TEXT "</answer>"                        # "Not answerable" declares no support
    PAGES   := INT ("," INT)*                                     # 1-based page numbers

Stop strings are the three closing action tags. The reward module's format check should call
``parse_action`` too, so env and reward agree on what "well formed" means.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from ragym.envs.turns import ParseError

ACTION_TAGS = ("select", "refine", "answer")
STOP_STRINGS = tuple(f"</{tag}>" for tag in ACTION_TAGS)
NOT_ANSWERABLE = "Not answerable"

_TURN = re.compile(r"\s*<reason>(.*?)</reason>\s*<(select|refine|answer)>(.*?)</\2>\s*", re.DOTALL)
_REFINE_BLOCKS = ("query", "note", "useful", "irrelevant")
# Where one refine block ends and a later one begins: "</a>", whitespace, "<b>".
_BETWEEN = {
    (a, b): re.compile(rf"</{a}>\s*<{b}>")
    for i, a in enumerate(_REFINE_BLOCKS)
    for b in _REFINE_BLOCKS[i + 1 :]
}
_PAGES = re.compile(r"\s*(\d{1,6}(?:\s*,\s*\d{1,6})*)?\s*")
_ANY_TAG = re.compile(r"</?(reason|select|refine|answer|query|note|useful|irrelevant)>")
_OPEN_ACTION = re.compile(r"<(select|refine|answer)>")


@dataclass(frozen=True)
class Select:
    """Move these candidate pages (1-based) into the accumulated set."""

    pages: tuple[int, ...]


@dataclass(frozen=True)
class Refine:
    """Ask for another round with a new query, a note, and page feedback for the beliefs."""

    query: str
    note: str
    useful: tuple[int, ...]
    irrelevant: tuple[int, ...]


@dataclass(frozen=True)
class Answer:
    """End the episode with ``text``; ``not_answerable`` when the text says the document cannot answer."""

    text: str
    not_answerable: bool


Action = Select | Refine | Answer


def is_not_answerable(text: str) -> bool:
    """True for "Not answerable" in any case, with or without surrounding punctuation."""
    return re.sub(r"[^a-z ]", "", text.lower()).split() == ["not", "answerable"]


def parse_pages(text: str) -> tuple[int, ...] | None:
    """Comma-separated page numbers, duplicates dropped in order; None when the text is not such a list."""
    m = _PAGES.fullmatch(text)
    if m is None:
        return None
    if m.group(1) is None:
        return ()
    # strip() before int(): \s matches the separators \x1c-\x1f, which int() does not take as whitespace
    return tuple(dict.fromkeys(int(p.strip()) for p in m.group(1).split(",")))


def parse_action(text: str, max_chars: int) -> Action | ParseError:
    """Parse one policy turn; never raises."""
    if not isinstance(text, str):
        return ParseError("not_text")
    if len(text) > max_chars:
        return ParseError("oversized")
    # Count the action tags first: on a turn of many, the lazy blocks of _TURN backtrack in quadratic time.
    m = _TURN.fullmatch(text) if len(_OPEN_ACTION.findall(text)) == 1 else None
    if m is None:
        return ParseError(_diagnose(text))
    reason, tag, body = m.groups()
    inner = body if tag == "refine" else reason + body
    if _ANY_TAG.search(reason) or (tag != "refine" and _ANY_TAG.search(inner)):
        return ParseError("nested_tags")
    if tag == "select":
        pages = parse_pages(body)
        return Select(pages) if pages else ParseError("bad_pages")
    if tag == "answer":
        answer = body.strip()
        return Answer(answer, is_not_answerable(answer)) if answer else ParseError("empty_answer")
    return _parse_refine(body)


def _parse_refine(body: str) -> Refine | ParseError:
    blocks = _refine_blocks(body)
    if blocks is None:
        return ParseError("bad_refine")
    query, note, useful, irrelevant = blocks
    if any(_ANY_TAG.search(part) for part in (query, note)):
        return ParseError("nested_tags")
    if not query.strip():
        return ParseError("empty_query")
    useful_pages, irrelevant_pages = parse_pages(useful), parse_pages(irrelevant)
    if useful_pages is None or irrelevant_pages is None:
        return ParseError("bad_pages")
    return Refine(query.strip(), note.strip(), useful_pages, irrelevant_pages)


def _refine_blocks(body: str) -> tuple[str, ...] | None:
    """The query, note, useful and irrelevant texts of a refine body ("" for a block left out), or None when the
    body is not ``<query>`` and then the optional blocks in that order, whitespace between.

    A block's text may itself hold tags, so a body can have several readings: this takes the one a regex of lazy
    blocks takes (the earliest end for the query, then for the next block, and so on), without that regex's
    backtracking, which took quadratic time and worse (minutes for some 8 kB bodies) on long malformed ones.
    """
    start, end = len(body) - len(body.lstrip()), len(body.rstrip())
    last = next((tag for tag in _REFINE_BLOCKS if body.endswith(f"</{tag}>", start, end)), None)
    if last is None or not body.startswith("<query>", start):
        return None
    # The body's last closing tag names its last block; each optional block before that one may be left out.
    optional = _REFINE_BLOCKS[1 : _REFINE_BLOCKS.index(last)]
    readings = []
    for keep in itertools.product((True, False), repeat=len(optional)):
        tags = ("query", *itertools.compress(optional, keep), last) if last != "query" else ("query",)
        spans = _earliest_spans(body, tags, start + len("<query>"), end - len(f"</{last}>"))
        if spans is not None:
            readings.append((spans, tags))
    if not readings:
        return None
    # Two readings with the same ends so far continue with the same block (the tag after the end names it),
    # so the first reading in the regex's order is the one whose ends come first.
    spans, tags = min(readings)
    texts = {tag: body[a:b] for tag, (a, b) in zip(tags, spans, strict=True)}
    return tuple(texts.get(tag, "") for tag in _REFINE_BLOCKS)


def _earliest_spans(body: str, tags: tuple[str, ...], pos: int, close: int) -> list[tuple[int, int]] | None:
    """Where the texts of the blocks ``tags`` lie when each ends as early as it can (``pos`` is where the first
    text starts, ``close`` where the last one ends), or None when they do not fit. An earlier end leaves more
    room for the blocks after it, so the earliest ends fit whenever any ends do."""
    spans = []
    for tag, following in itertools.pairwise(tags):
        m = _BETWEEN[tag, following].search(body, pos)
        if m is None:
            return None
        spans.append((pos, m.start()))
        pos = m.end()
    return [*spans, (pos, close)] if pos <= close else None


def _diagnose(text: str) -> str:
    num_actions = len(_OPEN_ACTION.findall(text))
    if num_actions == 0:
        return "no_action"
    if num_actions > 1:
        return "multiple_actions"
    if "<reason>" not in text or "</reason>" not in text:
        return "missing_reason"
    return "text_outside_blocks"


def format_pages(pages: tuple[int, ...]) -> str:
    """Page numbers as the grammar writes them (``3,7``)."""
    return ",".join(str(p) for p in pages)


def format_action(action: Action, reason: str = "") -> str:
    """The canonical turn text for ``action``: ``parse_action`` reads it back as the same action (empty
    feedback lists are left out, as the grammar allows)."""
    if isinstance(action, Select):
        body = f"<select>{format_pages(action.pages)}</select>"
    elif isinstance(action, Refine):
        parts = [f"<query>{action.query}</query>"]
        parts += [f"<note>{action.note}</note>"] if action.note else []
        parts += [f"<useful>{format_pages(action.useful)}</useful>"] if action.useful else []
        parts += [f"<irrelevant>{format_pages(action.irrelevant)}</irrelevant>"] if action.irrelevant else []
        body = f"<refine>{''.join(parts)}</refine>"
    else:
        body = f"<answer>{action.text}</answer>"
    return f"<reason>{reason}</reason>{body}"
