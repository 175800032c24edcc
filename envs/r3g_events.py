"""R3G-v0 event constructors, in one place (to join ``envs/events.py`` as its R3G section).

Kinds shared with the other envs (``action``, ``format_error``, ``protocol_violation``, ``truncated``,
``answer``) keep their shared fields; ``protocol_violation`` carries only ``reason``. R3G's own kinds:

- ``r3g_task`` (turn -1): ``gold_images`` (corpus ids), ``scenario``, ``pool_size`` (P), ``top_k`` (k),
  ``rerank`` (``fused`` | ``stage1`` | ``stage2``), ``use_plan``.
- ``plan``: ``text``.
- ``coarse_retrieval``: ``pool`` (corpus ids, Stage-1 order), ``similarities``, ``stage1``,
  ``gold_in_pool`` (bool).
- ``judge_error``: one per pooled candidate without usable scores: ``candidate`` (1-based, None when the
  line named none), ``reason`` (``envs.r3g_actions.JudgeError.reason``).
- ``evidence_selected``: ``pool``, ``stage1``, ``stage2`` (None per candidate that was not judged, all None
  in Stage-1-only mode), ``final``, ``ranking`` (pool ids by final score), ``selected`` (top k),
  ``gold_images``, ``rerank`` (mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Event = dict[str, Any]

R3G_KINDS = ("r3g_task", "plan", "coarse_retrieval", "judge_error", "evidence_selected")
"""Event kinds only ``R3G-v0`` records."""


def _event(event_type: str, turn: int, /, **fields: Any) -> Event:
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < -1:
        raise TypeError(f"{event_type} event: turn must be an int >= -1, got {turn!r}")
    return {"type": event_type, "turn": turn, **fields}


def action(turn: int, kind: str, well_formed: bool) -> Event:
    """One per policy turn: the parsed action's ``kind`` (``invalid`` when unparsable)."""
    return _event("action", turn, kind=str(kind), well_formed=bool(well_formed))


def format_error(turn: int, reason: str) -> Event:
    """The turn could not be parsed."""
    return _event("format_error", turn, reason=str(reason))


def protocol_violation(turn: int, reason: str) -> Event:
    """A well-formed action the protocol forbids; nothing was executed."""
    return _event("protocol_violation", turn, reason=str(reason))


def truncated(turn: int, reason: str) -> Event:
    """A budget ended the episode."""
    return _event("truncated", turn, reason=str(reason))


def answer(turn: int, text: str, forced: bool = False) -> Event:
    """The final answer (``forced``: the empty answer recorded by the truncation rule)."""
    return _event("answer", turn, text=str(text), forced=bool(forced))


def r3g_task(gold_images: Sequence[str], scenario: str, pool_size: int, top_k: int, rerank: str,
             use_plan: bool) -> Event:  # fmt: skip
    """Emitted by ``reset`` (turn -1): the gold evidence and the switches the episode runs with."""
    return _event("r3g_task", -1, gold_images=[str(g) for g in gold_images], scenario=str(scenario),
                  pool_size=int(pool_size), top_k=int(top_k), rerank=str(rerank), use_plan=bool(use_plan))  # fmt: skip


def plan(turn: int, text: str) -> Event:
    """The policy's plan of visual cues."""
    return _event("plan", turn, text=str(text))


def coarse_retrieval(turn: int, pool: Sequence[str], similarities: Sequence[float], stage1: Sequence[float],
                     gold_images: Sequence[str]) -> Event:  # fmt: skip
    """The top-P pool with cosine similarities and Stage-1 scores (``gold_in_pool`` is derived)."""
    if not len(pool) == len(similarities) == len(stage1):
        raise ValueError(
            f"coarse_retrieval event: {len(pool)} ids, {len(similarities)} sims, {len(stage1)} scores"
        )
    ids = [str(p) for p in pool]
    return _event("coarse_retrieval", turn, pool=ids, similarities=[float(s) for s in similarities],
                  stage1=[float(s) for s in stage1], gold_in_pool=bool(set(ids) & set(map(str, gold_images))))  # fmt: skip


def judge_error(turn: int, candidate: int | None, reason: str) -> Event:
    """One pooled candidate (or one judge line) without usable scores."""
    return _event(
        "judge_error", turn, candidate=None if candidate is None else int(candidate), reason=str(reason)
    )


def evidence_selected(turn: int, pool: Sequence[str], stage1: Sequence[float], stage2: Sequence[float | None],
                      final: Sequence[float], selected_positions: Sequence[int], gold_images: Sequence[str],
                      rerank: str) -> Event:  # fmt: skip
    """The fused ranking of the pool and the top-k evidence (``ranking`` and ``selected`` are derived)."""
    ids = [str(p) for p in pool]
    if not len(ids) == len(stage1) == len(stage2) == len(final):
        raise ValueError("evidence_selected event: pool, stage1, stage2 and final differ in length")
    ranking = sorted(range(len(ids)), key=lambda i: (-final[i], i))
    return _event("evidence_selected", turn, pool=ids, stage1=[float(s) for s in stage1],
                  stage2=[None if s is None else float(s) for s in stage2], final=[float(s) for s in final],
                  ranking=[ids[i] for i in ranking], selected=[ids[i] for i in selected_positions],
                  gold_images=[str(g) for g in gold_images], rerank=str(rerank))  # fmt: skip
