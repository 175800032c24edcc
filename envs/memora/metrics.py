"""MEMORA-v0's own episode metrics, from its events alone (the shared ones: ``ragym.envs.metrics``)."""

from __future__ import annotations

from ragym.envs.events import Event, events_of
from ragym.envs.metrics import Metrics, register_metrics, single_event

ACTION_KINDS = ("decompose", "subquery", "extract", "judge", "stop", "invalid")
"""Every ``action`` kind MEMORA-v0 records."""


@register_metrics("MEMORA-v0", action_kinds=ACTION_KINDS)
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
