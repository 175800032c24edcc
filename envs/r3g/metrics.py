"""R3G-v0's own episode metrics, from its events alone (the shared ones: ``ragym.envs.metrics``)."""

from __future__ import annotations

from ragym.envs.events import Event, events_of
from ragym.envs.metrics import Metrics, register_metrics, single_event

ACTION_KINDS = ("plan", "retrieve", "judge", "answer", "invalid")
"""Every ``action`` kind R3G-v0 records."""
RECALL_KS = (1, 3, 5)
"""The paper's Recall@K cut-offs."""


def r3g_failed_metrics(events: list[Event]) -> Metrics:
    """An episode the env ended by raising found nothing: Recall@1/3/5, evidence recall and gold in the pool 0,
    None only where its task names no gold image (an env that could not start names none, but every R3G row is
    prepared with its gold images, so it counts 0).

    >>> from ragym.envs import events as ev
    >>> r3g_failed_metrics([ev.episode_error(-1, "reset", "boom")])["recall@1"]
    0.0
    """
    tasks = events_of(events, "r3g_task")
    value = None if tasks and not tasks[0]["gold_images"] else 0.0
    keys = (*(f"recall@{k}" for k in RECALL_KS), "evidence_recall", "gold_in_pool")
    return dict.fromkeys(keys, value)


@register_metrics("R3G-v0", action_kinds=ACTION_KINDS, failed=r3g_failed_metrics)
def r3g_metrics(events: list[Event]) -> Metrics:
    """Recall@1/3/5 of the final pool ranking (R3G: any gold image in the top K; 0 without a ranking), gold in
    the pool, evidence recall (the selected top k), judge errors, and whether the plan came before retrieval.

    Gold images come from the ``r3g_task`` event; None where the row has none.

    >>> from ragym.envs.r3g.events import evidence_selected, plan, r3g_task
    >>> evs = [r3g_task(["g"], "Angle", 5, 1, "fused", True), plan(0, "p"),
    ...        evidence_selected(2, ["x", "g"], [0.6, 0.4], [0.1, 0.9], [0.7, 1.3], [1], ["g"], "fused")]
    >>> m = r3g_metrics(evs); m["recall@1"], m["evidence_recall"], m["plan_first"]
    (1.0, 1.0, 1.0)
    """
    task = single_event(events, "r3g_task", "R3G-v0")
    gold = set(task["gold_images"])
    selected = events_of(events, "evidence_selected")
    retrieval = events_of(events, "coarse_retrieval")
    plans = events_of(events, "plan")
    ranking = selected[0]["ranking"] if selected else []
    chosen = selected[0]["selected"] if selected else []

    def hit(ids: list[str]) -> float | None:
        return float(bool(gold & set(ids))) if gold else None

    metrics: Metrics = {f"recall@{k}": hit(ranking[:k]) for k in RECALL_KS}
    metrics.update(
        {
            "evidence_recall": hit(chosen),
            "gold_in_pool": hit(retrieval[0]["pool"]) if retrieval else (0.0 if gold else None),
            "judge_errors": float(len(events_of(events, "judge_error"))),
            "plan_first": float(bool(plans) and (not retrieval or plans[0]["turn"] < retrieval[0]["turn"]))
            if task["use_plan"]
            else None,
        }
    )
    return metrics
