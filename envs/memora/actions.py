"""MEMORA-v0 typed actions and the one parser that turns a policy turn into an action (or a ``ParseError``).

Grammar of one turn (whitespace between blocks is allowed, other text outside blocks is not)::

    turn      := "<reason>" TEXT "</reason>" action
    action    := "<decompose>" ("<factor p=" NUM ">" TEXT "</factor>")+ "</decompose>"
               | "<subquery f=" INT ">" TEXT "</subquery>"          # retrieval for factor f (1-based)
               | "<extract f=" INT ">" ("<e d=" INT " s=" NUM ">" TEXT "</e>")+ "</extract>"
               | "<judge>" INT (">" INT)* "</judge>"                 # listwise verdict, best first, each once
               | "<stop></stop>"
    NUM       := a decimal number; attribute values may be quoted ("0.5" or 0.5)

``<e d=7 s=8>snippet</e>`` is evidence that candidate 7 satisfies the factor with raw score 8 (of the env's
``evidence_scale``) and the supporting snippet. Documents are named by their candidate number. Stop strings
are the closing action tags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragym.envs.turns import ParseError

ACTION_TAGS = ("decompose", "subquery", "extract", "judge", "stop")
STOP_STRINGS = tuple(f"</{tag}>" for tag in ACTION_TAGS)

_NUM = r'"?(-?\d{1,6}(?:\.\d{1,6})?)"?'
_INT = r'"?(\d{1,6})"?'
_TURN = re.compile(
    r"\s*<reason>(.*?)</reason>\s*<(decompose|subquery|extract|judge|stop)((?:\s[^<>]*)?)>(.*?)</\2>\s*",
    re.DOTALL,
)
_FACTOR = re.compile(rf"\s*<factor\s+p={_NUM}\s*>(.*?)</factor>\s*", re.DOTALL)
_EVIDENCE = re.compile(rf"\s*<e\s+d={_INT}\s+s={_NUM}\s*>(.*?)</e>\s*", re.DOTALL)
_F_ATTR = re.compile(rf"\s+f={_INT}\s*")
_JUDGE = re.compile(r"\s*\d{1,6}(?:\s*>\s*\d{1,6})*\s*")
_ANY_TAG = re.compile(r"</?(reason|decompose|subquery|extract|judge|stop|factor|e)\b[^<>]*>")
_OPEN_ACTION = re.compile(r"<(decompose|subquery|extract|judge|stop)\b")


@dataclass(frozen=True)
class Decompose:
    """Set the query's intent factors: (text, raw priority) pairs."""

    factors: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Subquery:
    """Retrieve with ``text`` on behalf of factor ``factor`` (1-based) to expand the candidate pool."""

    factor: int
    text: str


@dataclass(frozen=True)
class Extract:
    """Evidence for factor ``factor``: (candidate number, raw score, snippet) triples."""

    factor: int
    evidence: tuple[tuple[int, float, str], ...]


@dataclass(frozen=True)
class Judge:
    """The listwise meta-verdict: candidate numbers, best first."""

    order: tuple[int, ...]


@dataclass(frozen=True)
class Stop:
    """End the episode; the env returns the final top-K."""


Action = Decompose | Subquery | Extract | Judge | Stop


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
    reason, tag, attrs, body = m.groups()
    if _ANY_TAG.search(reason):
        return ParseError("nested_tags")
    if tag in ("decompose", "extract"):
        return _parse_items(tag, attrs, body)
    if tag in ("judge", "stop") and attrs.strip():
        return ParseError("bad_attributes")
    if _ANY_TAG.search(body):
        return ParseError("nested_tags")
    if tag == "stop":
        return Stop() if not body.strip() else ParseError("text_in_stop")
    if tag == "judge":
        if _JUDGE.fullmatch(body) is None:
            return ParseError("bad_judge")
        # strip() before int(): \s matches the separators \x1c-\x1f, which int() does not take as whitespace
        return Judge(tuple(int(n.strip()) for n in body.split(">")))  # a repeat is the env's to refuse
    factor = _factor_attr(attrs)
    if factor is None:
        return ParseError("bad_attributes")
    return Subquery(factor, body.strip()) if body.strip() else ParseError("empty_subquery")


def _factor_attr(attrs: str) -> int | None:
    m = _F_ATTR.fullmatch(attrs)
    return int(m.group(1)) if m else None


def _parse_items(tag: str, attrs: str, body: str) -> Action | ParseError:
    """The repeated inner blocks of decompose (factors) and extract (evidence)."""
    pattern = _FACTOR if tag == "decompose" else _EVIDENCE
    items, pos = [], 0
    # Item by item from where the last one ended (a search for the next one from every later position would
    # take quadratic time on a long malformed body).
    while pos < len(body):
        m = pattern.match(body, pos)
        if m is None:
            return ParseError(f"bad_{tag}")
        items.append(m.groups())
        pos = m.end()
    if not items:
        return ParseError(f"bad_{tag}")
    if any(_ANY_TAG.search(item[-1]) for item in items):
        return ParseError("nested_tags")
    if tag == "decompose":
        if attrs.strip():
            return ParseError("bad_attributes")
        if any(not text.strip() for _, text in items):
            return ParseError("empty_factor")
        return Decompose(tuple((text.strip(), float(p)) for p, text in items))
    factor = _factor_attr(attrs)
    if factor is None:
        return ParseError("bad_attributes")
    return Extract(factor, tuple((int(d), float(s), snippet.strip()) for d, s, snippet in items))


def _diagnose(text: str) -> str:
    num_actions = len(_OPEN_ACTION.findall(text))
    if num_actions == 0:
        return "no_action"
    if num_actions > 1:
        return "multiple_actions"
    if "<reason>" not in text or "</reason>" not in text:
        return "missing_reason"
    return "text_outside_blocks"


def format_number(value: float) -> str:
    """A number as the grammar writes it: plain decimal, at most 6 decimals (``0.5``, ``8``)."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def format_action(action: Action, reason: str = "") -> str:
    """The canonical turn text for ``action``: ``parse_action`` reads it back as the same action (numbers with
    at most 6 decimals, as the grammar reads them)."""
    if isinstance(action, Decompose):
        body = "".join(f"<factor p={format_number(p)}>{text}</factor>" for text, p in action.factors)
        body = f"<decompose>{body}</decompose>"
    elif isinstance(action, Subquery):
        body = f"<subquery f={action.factor}>{action.text}</subquery>"
    elif isinstance(action, Extract):
        items = "".join(f"<e d={d} s={format_number(s)}>{snippet}</e>" for d, s, snippet in action.evidence)
        body = f"<extract f={action.factor}>{items}</extract>"
    elif isinstance(action, Judge):
        body = f"<judge>{'>'.join(str(n) for n in action.order)}</judge>"
    else:
        body = "<stop></stop>"
    return f"<reason>{reason}</reason>{body}"
