"""R3G typed actions and the one parser that turns a policy turn into an action (or a ``ParseError``).

Grammar of one turn (one action tag, nothing outside it but whitespace)::

    turn   := "<plan>" TEXT "</plan>"          # the visual cues needed, before any evidence
            | "<retrieve>" TEXT? "</retrieve>"  # coarse retrieval of the query image (text is recorded)
            | "<judge>" LINE+ "</judge>"        # one line per pooled candidate
            | "<answer>" TEXT "</answer>"
    LINE   := "[" INT "]" "r=" NUM "t=" NUM "a=" NUM RATIONALE

A judge block is parsed line by line: a line that does not fit, a score that is not a number in [0, 1],
a missing rationale, a repeated or unknown candidate number are per-candidate errors (``JudgeError``); the
judge action itself stays valid, so one bad line never costs the whole turn and never raises.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ragym.envs.core import MAX_TURN_CHARS
from ragym.envs.tag_blocks import tag_blocks
from ragym.envs.turns import ParseError

ACTION_TAGS = ("plan", "retrieve", "judge", "answer")
STOP_STRINGS = tuple(f"</{tag}>" for tag in ACTION_TAGS)

_TAG = re.compile(r"<(/?)(plan|retrieve|judge|answer)>")
_LINE = re.compile(r"^\s*\[\s*(\d{1,4})\s*\]\s*(.*)$")
_SCORE = re.compile(r"\b([rta])\s*=\s*(\S+?)(?=[\s,;:]|$)")
SUB_SCORES = ("r", "t", "a")
"""Semantic relatedness, target correspondence, answerability (R3G's three judge sub-scores)."""


@dataclass(frozen=True)
class Plan:
    """The ordered plan of visual cues, written from the question and query image alone."""

    text: str


@dataclass(frozen=True)
class Retrieve:
    """Coarse retrieval of the query image's top-P look-alikes; ``text`` is recorded, not searched."""

    text: str


@dataclass(frozen=True)
class JudgeScore:
    """One candidate's sub-scores in [0, 1] and its rationale."""

    candidate: int
    """1-based number of the candidate in the pool as shown."""
    r: float
    t: float
    a: float
    rationale: str


@dataclass(frozen=True)
class JudgeError:
    """Why one judge line (or one pooled candidate) has no usable scores."""

    candidate: int | None
    """The candidate the line named (None when the line named none)."""
    reason: str
    """``bad_line``, ``missing_score``, ``bad_score``, ``out_of_range``, ``missing_rationale``,
    ``duplicate_candidate``, ``unknown_candidate`` (env) or ``not_judged`` (env)."""


@dataclass(frozen=True)
class Judge:
    """The judge turn: the well-formed scores and the per-line errors, in line order."""

    scores: tuple[JudgeScore, ...]
    errors: tuple[JudgeError, ...]


@dataclass(frozen=True)
class Answer:
    """Final answer; ends the episode."""

    text: str


Action = Plan | Retrieve | Judge | Answer


ACTION_KINDS = {Plan: "plan", Retrieve: "retrieve", Judge: "judge", Answer: "answer"}


def action_kind(action: Action | ParseError) -> str:
    """The event ``kind`` of a parsed turn (``invalid`` for a ``ParseError``)."""
    return ACTION_KINDS.get(type(action), "invalid")


def _block(text: str) -> tuple[str, str] | ParseError:
    """The single (tag, inner text) of ``text``, or why there is not exactly one."""
    blocks = tag_blocks(text, _TAG)
    if isinstance(blocks, tuple):
        return ParseError(*blocks)
    if not blocks:
        return ParseError(
            "no_action", "no action tag found; give exactly one of <plan>, <retrieve>, <judge>, <answer>."
        )
    if len(blocks) > 1:
        return ParseError("multiple_actions", f"{len(blocks)} action tags found; give exactly one per turn.")
    tag, inner, start, end = blocks[0]
    if text[:start].strip() or text[end:].strip():
        return ParseError("text_outside_tags", "write nothing outside the action tag.")
    return tag, inner


def _score(candidate: int, name: str, raw: str | None) -> float | JudgeError:
    if raw is None:
        return JudgeError(candidate, "missing_score")
    try:
        value = float(raw)
    except ValueError:
        return JudgeError(candidate, "bad_score")
    if not math.isfinite(value):
        return JudgeError(candidate, "bad_score")
    return value if 0.0 <= value <= 1.0 else JudgeError(candidate, "out_of_range")


def parse_judge_line(line: str) -> JudgeScore | JudgeError:
    """One judge line ``[i] r=.. t=.. a=.. rationale`` as scores, or the reason it is unusable."""
    match = _LINE.match(line)
    if match is None:
        return JudgeError(None, "bad_line")
    candidate, rest = int(match.group(1)), match.group(2)
    found: dict[str, str] = {}
    for key, raw in _SCORE.findall(rest):
        found.setdefault(key, raw)
    values: dict[str, float] = {}
    for name in SUB_SCORES:
        value = _score(candidate, name, found.get(name))
        if isinstance(value, JudgeError):
            return value
        values[name] = value
    rationale = " ".join(_SCORE.sub(" ", rest).split()).strip(" ,;:-")
    if not rationale:
        return JudgeError(candidate, "missing_rationale")
    return JudgeScore(candidate, values["r"], values["t"], values["a"], rationale)


def parse_judge(inner: str) -> Judge:
    """Every non-blank line of a judge block, scores and errors apart (duplicates are errors)."""
    scores: list[JudgeScore] = []
    errors: list[JudgeError] = []
    seen: set[int] = set()
    for line in inner.splitlines():
        if not line.strip():
            continue
        parsed = parse_judge_line(line)
        if isinstance(parsed, JudgeScore) and parsed.candidate in seen:
            parsed = JudgeError(parsed.candidate, "duplicate_candidate")
        if isinstance(parsed, JudgeError):
            errors.append(parsed)
        else:
            seen.add(parsed.candidate)
            scores.append(parsed)
    return Judge(tuple(scores), tuple(errors))


def parse_action(text: str, *, max_chars: int = MAX_TURN_CHARS) -> Action | ParseError:
    """Parse one policy turn into a typed action, or explain why it is not well formed."""
    if len(text) > max_chars:
        return ParseError("oversized", f"the turn has {len(text)} characters; the limit is {max_chars}.")
    block = _block(text)
    if isinstance(block, ParseError):
        return block
    tag, inner = block
    if tag == "judge":
        return parse_judge(inner)
    body = " ".join(inner.split())
    if tag == "retrieve":
        return Retrieve(body)
    if not body:
        return ParseError("empty", f"<{tag}> is empty.")
    return Plan(body) if tag == "plan" else Answer(body)


def format_judge_line(score: JudgeScore) -> str:
    """The canonical judge line of one candidate."""
    return f"[{score.candidate}] r={score.r:g} t={score.t:g} a={score.a:g} {score.rationale}"


def format_action(action: Action) -> str:
    """The canonical turn text for ``action`` (used by scripted policies and tests)."""
    if isinstance(action, Plan):
        return f"<plan>{action.text}</plan>"
    if isinstance(action, Retrieve):
        return f"<retrieve>{action.text}</retrieve>"
    if isinstance(action, Judge):
        return "<judge>\n" + "\n".join(format_judge_line(s) for s in action.scores) + "\n</judge>"
    return f"<answer>{action.text}</answer>"
