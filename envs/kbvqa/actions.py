"""KB-VQA typed actions and the one parser that turns a policy turn into an action (or a ``ParseError``).

Grammar of one turn (MMAgent-R², Table 1 and Appendix B; whitespace around blocks is allowed)::

    turn     := "<reason>" TEXT "</reason>" action
    action   := "<search_call>" call "</search_call>"
              | "<rerank>" decision "</rerank>"
              | "<answer>" TEXT "</answer>"
    call     := "SearchImage(" INT ")"                    # 1-based query image index j
              | "SearchText(" JSON_LIST_OF_STRINGS ")"    # or a single JSON string
    decision := "Reject()" | ENTITY_NAME                  # Rerank(e) is the bare entity name
                                                          # (KBVQA-Demo-v0 also resolves a number)

Without the Reject action (``allow_reject=False``, MMAgent-R² Table 5's "w/o Reject") ``Reject()`` is a
``reject_not_allowed`` parse error, not an entity name.

The paper has three stop strings (``</search_call>``, ``</rerank>``, ``</answer>``), so both searches share
``<search_call>`` and Reject lives inside ``<rerank>`` as ``Reject()``. The reason block is required, text
outside the blocks is not allowed, and tags never nest. ``parse_action`` is also what the reward module
uses for its format check, so the env and the reward always agree on what "well formed" means.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ragym.envs.core import MAX_TURN_CHARS
from ragym.envs.tag_blocks import tag_blocks
from ragym.envs.turns import ParseError

REASON_TAG = "reason"
ACTION_TAGS = ("search_call", "rerank", "answer")
STOP_STRINGS = tuple(f"</{tag}>" for tag in ACTION_TAGS)

_TAG = re.compile(r"<(/?)(reason|search_call|rerank|answer)>")
_SEARCH_IMAGE = re.compile(r"SearchImage\(\s*([+-]?\d{1,6})\s*\)")
_SEARCH_TEXT = re.compile(r"SearchText\((.*)\)", re.DOTALL)
REJECT_TOKEN = "Reject()"


@dataclass(frozen=True)
class SearchImage:
    """Serve the next non-overlapping batch of candidates for query image ``image`` (1-based)."""

    image: int


@dataclass(frozen=True)
class SearchText:
    """Retrieve the top passages for each query and concatenate them."""

    queries: tuple[str, ...]


@dataclass(frozen=True)
class Rerank:
    """Confirm entity ``entity`` (its name as shown) from the active image's current batch."""

    entity: str


@dataclass(frozen=True)
class Reject:
    """Declare that no candidate of the current batch matches the active query image."""


@dataclass(frozen=True)
class Answer:
    """Final answer; ends the episode."""

    text: str


Action = SearchImage | SearchText | Rerank | Reject | Answer


ACTION_KINDS = {
    SearchImage: "search_image",
    SearchText: "search_text",
    Rerank: "rerank",
    Reject: "reject",
    Answer: "answer",
}


def action_kind(action: Action | ParseError) -> str:
    """The event ``kind`` of a parsed turn (``invalid`` for a ``ParseError``)."""
    return ACTION_KINDS.get(type(action), "invalid")


def _blocks(text: str) -> list[tuple[str, str, int, int]] | ParseError:
    """Split ``text`` into (tag, inner text, start, end) blocks; reject nesting and unbalanced tags."""
    blocks = tag_blocks(text, _TAG)
    if isinstance(blocks, tuple):
        return ParseError(*blocks)
    return blocks


def _is_query(query: object) -> bool:
    """A non-empty string that UTF-8 can encode: a JSON escape such as ``"\\ud83d"`` decodes to a lone
    surrogate, which the observation echoes into the policy's tokenizer (it raises there) and episodes into
    UTF-8 files."""
    if not isinstance(query, str) or not query.strip():
        return False
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_call(inner: str) -> Action | ParseError:
    """The argument of a ``<search_call>`` block."""
    body = inner.strip()
    if match := _SEARCH_IMAGE.fullmatch(body):
        return SearchImage(int(match.group(1)))
    if match := _SEARCH_TEXT.fullmatch(body):
        try:
            queries = json.loads(match.group(1))
        except (json.JSONDecodeError, RecursionError):  # a few thousand "[" fit in one turn
            queries = None
        if isinstance(queries, str):
            queries = [queries]
        if isinstance(queries, list) and queries and all(_is_query(q) for q in queries):
            return SearchText(tuple(q.strip() for q in queries))
        return ParseError(
            "bad_argument",
            'SearchText needs a JSON list of non-empty strings of valid Unicode: SearchText(["..."]).',
        )
    return ParseError("bad_argument", "<search_call> must hold SearchImage(j) or SearchText([...]).")


def _parse_block(tag: str, inner: str, allow_reject: bool) -> Action | ParseError:
    """The typed action for one action block."""
    if tag == "search_call":
        return _parse_call(inner)
    body = " ".join(inner.split())
    if not body:
        return ParseError("bad_argument", f"<{tag}> is empty.")
    if tag == "answer":
        return Answer(body)
    if body != REJECT_TOKEN:
        return Rerank(body)
    return Reject() if allow_reject else ParseError("reject_not_allowed", NO_REJECT)


NO_REJECT = "there is no Reject() in this setting; confirm a candidate with <rerank>NAME</rerank> or go on."
"""The parse-error message for ``Reject()`` without the Reject action."""


def parse_action(
    text: str, *, max_chars: int = MAX_TURN_CHARS, allow_reject: bool = True
) -> Action | ParseError:
    """Parse one policy turn into a typed action, or explain why it is not well formed (``allow_reject``
    False: the env offers no Reject, so ``Reject()`` is malformed)."""
    if len(text) > max_chars:
        return ParseError("oversized", f"the turn has {len(text)} characters; the limit is {max_chars}.")
    blocks = _blocks(text)
    if isinstance(blocks, ParseError):
        return blocks
    actions = [b for b in blocks if b[0] != REASON_TAG]
    reasons = [b for b in blocks if b[0] == REASON_TAG]
    if not actions:
        return ParseError("no_action", "no action tag found; end the turn with one action tag.")
    if len(actions) > 1:
        return ParseError("multiple_actions", f"{len(actions)} action tags found; give exactly one per turn.")
    if not reasons:
        return ParseError("missing_reason", "start the turn with <reason>...</reason>.")
    if len(reasons) > 1:
        return ParseError("multiple_reasons", "give exactly one <reason> block per turn.")
    (_, _, r_start, r_end), (tag, inner, a_start, a_end) = reasons[0], actions[0]
    if r_start > a_start:
        return ParseError("reason_after_action", "the <reason> block must come before the action tag.")
    if text[:r_start].strip() or text[r_end:a_start].strip() or text[a_end:].strip():
        return ParseError("text_outside_tags", "write nothing outside the <reason> block and the action tag.")
    return _parse_block(tag, inner, allow_reject)


def format_action(action: Action, reason: str = "") -> str:
    """The canonical turn text for ``action`` (used by scripted policies and tests)."""
    if isinstance(action, SearchImage):
        body = f"<search_call>SearchImage({action.image})</search_call>"
    elif isinstance(action, SearchText):
        body = (
            f"<search_call>SearchText({json.dumps(list(action.queries), ensure_ascii=False)})</search_call>"
        )
    elif isinstance(action, Rerank):
        body = f"<rerank>{action.entity}</rerank>"
    elif isinstance(action, Reject):
        body = f"<rerank>{REJECT_TOKEN}</rerank>"
    else:
        body = f"<answer>{action.text}</answer>"
    return f"<reason>{reason}</reason>{body}"
