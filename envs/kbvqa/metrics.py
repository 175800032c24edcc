"""KBVQA-v0 and KBVQA-Demo-v0's own episode metrics, from its events alone (the shared ones: ``ragym.envs.metrics``)."""

from __future__ import annotations

from ragym.envs.events import Event, events_of
from ragym.envs.metrics import Metrics, register_metrics, single_event

ACTION_KINDS = ("search_image", "search_text", "rerank", "reject", "answer", "invalid")
"""Every ``action`` kind KBVQA-v0 records."""


@register_metrics("KBVQA-Demo-v0", action_kinds=ACTION_KINDS)  # the same episodes, with demo aids
@register_metrics("KBVQA-v0", action_kinds=ACTION_KINDS)
def kbvqa_metrics(events: list[Event]) -> Metrics:
    """Ident. (MMAgent-R² 4.2.2: 1 only when every query image's confirmed entity is its gold entity),
    the share of images identified, rejections (and needless ones), verification accuracy, boundary prompts and searches.

    An image's confirmed entity is its last Rerank; correctness is recomputed from gold and candidates.
    """
    task = single_event(events, "task", "KBVQA-v0")
    golds = task["gold_entities"]
    verifications = events_of(events, "verification")
    confirmed = {v["image"]: v["entity"] for v in verifications if v["decision"] == "rerank"}
    has_gold = all(g is not None for g in golds)
    matched = [confirmed.get(j) == g for j, g in enumerate(golds, 1)]
    right = [
        (v["entity"] == v["gold_entity"])
        if v["decision"] == "rerank"
        else v["gold_entity"] not in v["candidates"]
        for v in verifications
        if v["gold_entity"] is not None
    ]
    return {
        "ident_acc": float(all(matched)) if has_gold else None,
        "ident_image_share": sum(matched) / len(matched) if has_gold else None,
        "rejections": float(sum(v["decision"] == "reject" for v in verifications)),
        # Table 8's cost of a large delta: Reject() of a batch that held the gold entity.
        "needless_rejections": float(
            sum(v["decision"] == "reject" and v["gold_entity"] in v["candidates"] for v in verifications)
        ),
        "verification_acc": sum(right) / len(right) if right else None,
        "boundaries": float(len(events_of(events, "boundary"))),
        "searches": float(len(events_of(events, "search_image")) + len(events_of(events, "search_text"))),
    }
