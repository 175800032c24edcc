"""MEMORA-v0's own episode metrics, from its events alone (the shared ones: ``ragym.envs.metrics``)."""

from __future__ import annotations

from ragym.envs.events import Event, events_of
from ragym.envs.metrics import Metrics, register_metrics, single_event

ACTION_KINDS = ("decompose", "subquery", "extract", "judge", "stop", "invalid")
"""Every ``action`` kind MEMORA-v0 records."""


def memora_failed_metrics(events: list[Event]) -> Metrics:
    """An episode the env ended by raising ranked nothing: nDCG@K 0 (as the rubric scores it), the first stage's
    nDCG@K as reset recorded it, and the gain 0 minus it, where the row has qrels; None without qrels. An env that
    could not start recorded no first stage: all three None, which ``mean_metrics`` counts 0 wherever other
    episodes report them (KB-VQA's Ident. rule; the rubric's ``first_stage_ndcg`` term scores it 0 too).

    >>> from ragym.envs import events as ev
    >>> from ragym.envs.memora import events as memora_ev
    >>> memora_failed_metrics([memora_ev.first_stage("q", ["a"], [1.0], 0.5), ev.episode_error(0, "step", "boom")])
    {'ndcg': 0.0, 'first_stage_ndcg': 0.5, 'ndcg_gain': -0.5}
    """
    first = events_of(events, "first_stage")
    base = first[0]["ndcg"] if first else None
    if base is None:
        return dict.fromkeys(("ndcg", "first_stage_ndcg", "ndcg_gain"))
    return {"ndcg": 0.0, "first_stage_ndcg": base, "ndcg_gain": 0.0 - base}


@register_metrics("MEMORA-v0", action_kinds=ACTION_KINDS, failed=memora_failed_metrics)
def memora_metrics(events: list[Event]) -> Metrics:
    """nDCG@K of the final ranking beside the first stage's (None without qrels or a final ranking), memory
    hits and records at reset, whether memory was written, actions, pool growth, factors, evidence edges,
    whether the judge ran, and whether a budget forced the ranking."""
    read = single_event(events, "memory_read", "MEMORA-v0")
    writes, final = events_of(events, "memory_write"), events_of(events, "final_ranking")
    decompositions = events_of(events, "decompose")
    ndcg = writes[-1]["ndcg"] if writes else None
    first = writes[-1]["first_stage_ndcg"] if writes else None
    return {
        "ndcg": ndcg,
        "first_stage_ndcg": first,
        "ndcg_gain": ndcg - first if ndcg is not None and first is not None else None,
        "actions": float(len(events_of(events, "action"))),
        "memory_hits": float(read["hits"]),
        "memory_records": float(read["num_records"]),
        "memory_written": float(bool(writes) and writes[-1]["written"]),
        "pool_added": float(sum(len(e["added"]) for e in events_of(events, "subquery"))),
        "factors": float(len(decompositions[-1]["factors"])) if decompositions else 0.0,
        "evidence_edges": float(sum(len(e["docs"]) for e in events_of(events, "factor_evidence"))),
        "judged": float(bool(events_of(events, "verdict"))),
        "forced_ranking": float(final[-1]["forced"]) if final else None,
    }
