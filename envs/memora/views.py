"""MEMORA-v0 observation texts: the system prompt, the reset view, candidate lists and error messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragym.envs.core import IMAGE_PLACEHOLDER, defuse
from ragym.envs.memora.memory import MemoryRecord
from ragym.envs.observations import cut_tail

if TYPE_CHECKING:
    import numpy as np

SYSTEM_PROMPT = """You rerank documents for a reasoning-intensive query as MEMORA's factor committee and controller.
Each turn: <reason>...</reason> followed by exactly one action.
- <decompose><factor p=0.5>first intent factor</factor><factor p=0.3>second</factor></decompose>: the query's \
intent factors with priorities (between the minimum and maximum factor count shown).
- <subquery f=1>search text</subquery>: retrieve for factor 1; new documents join the candidates.
- <extract f=1><e d=7 s=8>snippet from candidate 7</e><e d=3 s=1>...</e></extract>: evidence that candidates \
satisfy factor 1, scored 0 to the evidence scale, with the supporting snippet.
- <judge>7 > 3 > 12</judge>: your listwise verdict over candidates, best first.
- <stop></stop>: finish; the environment returns the top documents by its factor-aware score.
Candidates are named by number. Every action kind has a call budget."""


def memory_view(
    memories: Sequence[tuple[MemoryRecord, float]], num_records: int, query_chars: int, k: int
) -> str:
    """The K_m nearest past episodes of the domain: query, outcome (nDCG@``k``) and factors that helped (+) or
    hurt (-)."""
    if not memories:
        return f"Domain memory: no similar past episode ({num_records} stored)."
    lines = [f"Domain memory ({len(memories)} of {num_records} past episodes, most similar first):"]
    mark = {"helped": "+", "hurt": "-", "neutral": "~"}
    for i, (record, sim) in enumerate(memories, 1):
        factors = ", ".join(f"{mark[f.outcome]}{defuse(f.text)}" for f in record.factors) or "none"
        lines.append(
            f"  M{i} (similarity {sim:.2f}, nDCG@{k} {record.ndcg:.2f}) {defuse(record.query[:query_chars])!r}; factors: {factors}"
        )
    return "\n".join(lines)


def query_view(query: str, has_image: bool, description: str | None) -> str:
    """The query, with its image placeholder or image description for multimodal queries."""
    text = f"Query: {defuse(query)}"
    if has_image:
        text += f"\nQuery image: {IMAGE_PLACEHOLDER}"
    if description:
        text += f"\nQuery image description: {defuse(description)}"
    return text


def candidates_view(
    rows: Sequence[tuple[int, str, float, str]],
    num_pool: int,
    signals: dict[str, float],
    doc_chars: int,
    shown: set[str] | None = None,
    text_chars: int | None = None,
) -> str:
    """Top candidates as ``[n] (score) docid: text``, then the controller's two signals.

    With ``shown`` (the docids whose text this episode already showed), a candidate shown before is listed without
    its text (``[n] (score) docid (text above)``): the policy's context holds it, and repeating K_c texts after
    every turn made MEMORA's longest episode overflow its response length. ``text_chars`` (a view over
    ``max_obs_chars``) cuts each text shown to that many characters, ending in ``CUT_MARK``.
    """
    lines = [f"Candidates (top {len(rows)} of {num_pool} by factor-aware score):"]
    for number, docid, score, text in rows:
        if shown is not None and docid in shown:
            lines.append(f"[{number}] ({score:.3f}) {docid} (text above)")
            continue
        excerpt = defuse(text[:doc_chars])
        if text_chars is not None:
            excerpt = cut_tail(excerpt, text_chars)
        lines.append(f"[{number}] ({score:.3f}) {docid}: {excerpt}")
    lines.append(
        f"Controller signals: top-K margin {signals['margin']:.4f}, evidence support {signals['support']:.2f}"
    )
    return "\n".join(lines)


def factors_view(
    factors: Sequence[tuple[str, float]],
    adjusted: Sequence[float] | np.ndarray,
    priors: Sequence[tuple[int, int]],
) -> str:
    """Factors with the policy's priority, the memory prior (h helped, l hurt) and the priority used."""
    if not factors:
        return "Factors: none yet."
    lines = ["Factors (priority given -> used; memory prior helped/hurt):"]
    for k, ((text, p), used, (helped, hurt)) in enumerate(zip(factors, adjusted, priors, strict=True), 1):
        lines.append(f"  f{k} {defuse(text)!r}: {p:.2f} -> {used:.2f} (h={helped}, l={hurt})")
    return "\n".join(lines)


def budget_view(left: dict[str, int], turns_left: int) -> str:
    """Calls left per action kind and turns left."""
    calls = ", ".join(f"{kind} {n}" for kind, n in left.items())
    return f"Budget left: {calls}; turns {turns_left}."


def error_view(reason: str, turns_left: int) -> str:
    """What was wrong with the last turn."""
    return f"Your last turn was not applied ({reason}). Turns left: {turns_left}."
