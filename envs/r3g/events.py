"""R3G-v0's own event kinds, one constructor each (images are corpus ids; candidates are
1-based, as the policy writes ``[i]``).

The kinds every env records (``action``, ``format_error``, ``answer``, ...) are made by ``ragym.envs.events``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragym.envs.events import (
    Event,
    bool_field,
    float_field,
    float_list,
    int_field,
    int_list,
    list_field,
    make_event,
    register_event_kinds,
    str_field,
    str_list,
)

KINDS = ("r3g_task", "plan", "coarse_retrieval", "judge_error", "evidence_selected")
"""The event kinds R3G-v0 adds to the shared vocabulary."""
register_event_kinds(*KINDS)


def r3g_task(
    gold_images: Sequence[str],
    scenario: str,
    pool_size: int,
    top_k: int,
    rerank: str,
    use_plan: bool,
    pool_source: str = "corpus",
    judge_guidelines: bool = True,
) -> Event:
    """Emitted by ``reset`` (turn -1): the gold evidence and the switches (P, k, rerank mode, plan, where the pool
    comes from, judge guidelines) it runs with, so a report can tell MRAG from an ablation."""
    if rerank not in ("fused", "stage1", "stage2", "none"):
        raise ValueError(f"r3g_task event: rerank must be fused, stage1, stage2 or none, got {rerank!r}")
    if pool_source not in ("corpus", "benchmark"):
        raise ValueError(f"r3g_task event: pool_source must be corpus or benchmark, got {pool_source!r}")
    return make_event(
        "r3g_task",
        -1,
        gold_images=str_list("r3g_task", "gold_images", gold_images),
        scenario=str_field("r3g_task", "scenario", scenario),
        pool_size=int_field("r3g_task", "pool_size", pool_size, 1),
        top_k=int_field("r3g_task", "top_k", top_k, 1),
        rerank=rerank,
        use_plan=bool_field("r3g_task", "use_plan", use_plan),
        pool_source=pool_source,
        judge_guidelines=bool_field("r3g_task", "judge_guidelines", judge_guidelines),
    )


def plan(turn: int, text: str) -> Event:
    """The policy's plan of visual cues, written before any evidence."""
    return make_event("plan", turn, text=str_field("plan", "text", text))


def coarse_retrieval(
    turn: int,
    pool: Sequence[str],
    similarities: Sequence[float],
    stage1: Sequence[float],
    gold_images: Sequence[str],
) -> Event:
    """The top-P pool (Stage-1 order) with cosine similarities and Stage-1 scores; ``gold_in_pool`` is derived."""
    ids = str_list("coarse_retrieval", "pool", pool)
    sims, s1 = (
        float_list("coarse_retrieval", "similarities", similarities),
        float_list("coarse_retrieval", "stage1", stage1),
    )
    if not len(ids) == len(sims) == len(s1):
        raise ValueError(
            f"coarse_retrieval event: {len(ids)} ids, {len(sims)} similarities, {len(s1)} scores"
        )
    gold = set(str_list("coarse_retrieval", "gold_images", gold_images))
    return make_event(
        "coarse_retrieval", turn, pool=ids, similarities=sims, stage1=s1, gold_in_pool=bool(gold & set(ids))
    )


def judge_error(turn: int, candidate: int | None, reason: str) -> Event:
    """One pooled candidate (or one judge line naming none: ``candidate`` None) without usable scores."""
    number = None if candidate is None else int_field("judge_error", "candidate", candidate)
    return make_event(
        "judge_error", turn, candidate=number, reason=str_field("judge_error", "reason", reason)
    )


def evidence_selected(
    turn: int,
    pool: Sequence[str],
    stage1: Sequence[float],
    stage2: Sequence[float | None],
    final: Sequence[float],
    selected_positions: Sequence[int],
    gold_images: Sequence[str],
    rerank: str,
) -> Event:
    """The pool's final ranking and the top-k evidence; ``ranking`` (ties keep pool order) and ``selected``
    are derived. ``stage2`` is None for a candidate without usable judge scores (all None under Stage-1 only)."""
    kind = "evidence_selected"
    ids, s1, fin = (
        str_list(kind, "pool", pool),
        float_list(kind, "stage1", stage1),
        float_list(kind, "final", final),
    )
    s2 = [
        None if s is None else float_field(kind, f"stage2[{i}]", s)
        for i, s in enumerate(list_field(kind, "stage2", stage2))
    ]
    if not len(ids) == len(s1) == len(s2) == len(fin):
        raise ValueError(f"{kind} event: pool, stage1, stage2 and final differ in length")
    positions = int_list(kind, "selected_positions", selected_positions)
    if any(not 0 <= p < len(ids) for p in positions):
        raise ValueError(f"{kind} event: selected positions {positions} outside a pool of {len(ids)}")
    order = sorted(range(len(ids)), key=lambda i: (-fin[i], i))
    return make_event(
        kind,
        turn,
        pool=ids,
        stage1=s1,
        stage2=s2,
        final=fin,
        ranking=[ids[i] for i in order],
        selected=[ids[p] for p in positions],
        gold_images=str_list(kind, "gold_images", gold_images),
        rerank=str_field(kind, "rerank", rerank),
    )
