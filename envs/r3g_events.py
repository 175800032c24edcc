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


# ----- episode metrics (to register in envs/metrics.py as the R3G-v0 section) ----------------------------
R3G_ACTION_KINDS = ("plan", "retrieve", "judge", "answer", "invalid")
"""Every ``action`` kind R3G-v0 records."""
RECALL_KS = (1, 3, 5)
"""The paper's Recall@K cut-offs."""


def r3g_metrics(events: list[Event]) -> dict[str, float | None]:
    """Recall@1/3/5 of the final pool ranking (R3G: any gold image in the top K; 0 without a ranking), gold in
    the pool, evidence recall (the selected top k), judge errors, and whether the plan came before retrieval.

    Gold images come from the ``r3g_task`` event; None where the row has none.

    >>> evs = [r3g_task(["g"], "Angle", 5, 1, "fused", True), plan(0, "p"),
    ...        evidence_selected(2, ["x", "g"], [0.6, 0.4], [0.1, 0.9], [0.7, 1.3], [1], ["g"], "fused")]
    >>> m = r3g_metrics(evs); m["recall@1"], m["evidence_recall"], m["plan_first"]
    (1.0, 1.0, 1.0)
    """
    task = [e for e in events if e["type"] == "r3g_task"]
    if len(task) != 1:
        raise ValueError(f"R3G-v0 episode metrics need exactly one 'r3g_task' event, got {len(task)}")
    gold = set(task[0]["gold_images"])
    selected = [e for e in events if e["type"] == "evidence_selected"]
    retrieval = [e for e in events if e["type"] == "coarse_retrieval"]
    plans = [e for e in events if e["type"] == "plan"]
    ranking = selected[0]["ranking"] if selected else []
    chosen = selected[0]["selected"] if selected else []

    def hit(ids: list[str]) -> float | None:
        return float(bool(gold & set(ids))) if gold else None

    metrics: dict[str, float | None] = {f"recall@{k}": hit(ranking[:k]) for k in RECALL_KS}
    metrics.update({
        "evidence_recall": hit(chosen),
        "gold_in_pool": hit(retrieval[0]["pool"]) if retrieval else (0.0 if gold else None),
        "judge_errors": float(sum(e["type"] == "judge_error" for e in events)),
        "plan_first": float(bool(plans) and (not retrieval or plans[0]["turn"] < retrieval[0]["turn"]))
        if task[0]["use_plan"] else None,
    })  # fmt: skip
    return metrics
