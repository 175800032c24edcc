"""KBVQA-v0 and KBVQA-Demo-v0's own episode metrics, from its events alone (the shared ones: ``ragym.envs.metrics``)."""

from __future__ import annotations

from ragym.envs.events import Event, events_of
from ragym.envs.metrics import Metrics, register_metrics, single_event

ACTION_KINDS = ("search_image", "search_text", "rerank", "reject", "answer", "invalid")
"""Every ``action`` kind KBVQA-v0 records."""


def rejects_at_limit(events: list[Event], max_rejections: int) -> set[tuple[int, int]]:
    """(image, batch id) of each Reject issued when its image's RejCount already equalled Rej_max.

    MMAgent-R²'s Algorithm S1 (lines 14-20) checks RejCount(j) alone, the Rejects counted for image j: such a
    Reject brings the boundary prompt and does not increment it. Batches paged by repeated SearchImage calls
    are not rejections and do not move the limit. Recomputed from the first decision on each batch, in order,
    not taken from the decision's ``at_limit`` flag, so the metrics and the verification reward read it the
    same way in any saved episode.

    >>> from ragym.envs.kbvqa import events as kbvqa_ev
    >>> reject = [kbvqa_ev.verification(b, "reject", None, 1, b, ["a"], "g") for b in range(3)]
    >>> sorted(rejects_at_limit(reject, 1)), sorted(rejects_at_limit(reject, 2))
    ([(1, 1), (1, 2)], [(1, 2)])
    """
    counted: dict[int, int] = {}  # image -> RejCount
    at_limit: set[tuple[int, int]] = set()
    decided: set[tuple[int, int]] = set()
    for decision in events_of(events, "verification"):
        key = (decision["image"], decision["batch_id"])
        if key in decided:  # only a batch's first decision is one (a second is a protocol violation)
            continue
        decided.add(key)
        if decision["decision"] != "reject":
            continue
        if counted.get(key[0], 0) >= max_rejections:
            at_limit.add(key)
        else:
            counted[key[0]] = counted.get(key[0], 0) + 1
    return at_limit


def kbvqa_failed_metrics(events: list[Event]) -> Metrics:
    """An episode the env ended by raising identified nothing: Ident. and the image share 0 where its task
    names every gold entity, None where it does not (or the env raised before its task: ``mean_metrics`` then
    counts them 0 wherever other episodes report them, as ``eval_figures`` does, and neither counts it twice).

    >>> from ragym.envs import events as ev
    >>> from ragym.envs.kbvqa import events as kbvqa_ev
    >>> kbvqa_failed_metrics([kbvqa_ev.task(1, ["Q1"], 2, 5, 6), ev.episode_error(0, "step", "boom")])
    {'ident_acc': 0.0, 'ident_image_share': 0.0}
    """
    tasks = events_of(events, "task")
    known = bool(tasks) and all(g is not None for g in tasks[0]["gold_entities"])
    value = 0.0 if known else None
    return {"ident_acc": value, "ident_image_share": value}


# KBVQA-Demo-v0: the same episodes, with demo aids.
@register_metrics("KBVQA-Demo-v0", action_kinds=ACTION_KINDS, failed=kbvqa_failed_metrics)
@register_metrics("KBVQA-v0", action_kinds=ACTION_KINDS, failed=kbvqa_failed_metrics)
def kbvqa_metrics(events: list[Event]) -> Metrics:
    """Ident. (MMAgent-R² 4.2.2: 1 only when every query image's confirmed entity is its gold entity),
    the share of images identified, rejections (Algorithm S1's RejCount, summed over images: a Reject at the
    limit is not one, and is counted apart), verification accuracy, boundary prompts and searches.

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
    last = rejects_at_limit(events, task["max_rejections"])
    rejects = [v for v in verifications if v["decision"] == "reject"]
    counted = [v for v in rejects if (v["image"], v["batch_id"]) not in last]
    return {
        "ident_acc": float(all(matched)) if has_gold else None,
        "ident_image_share": sum(matched) / len(matched) if has_gold else None,
        "rejections": float(len(counted)),
        # Table 8's cost of a large delta: a counted Reject() of a batch that held the gold entity.
        "needless_rejections": float(sum(v["gold_entity"] in v["candidates"] for v in counted)),
        # Reject() when the image's RejCount is already Rej_max: the boundary prompt, not a rejection (S1).
        "rejects_at_limit": float(len(rejects) - len(counted)),
        "verification_acc": sum(right) / len(right) if right else None,
        "boundaries": float(len(events_of(events, "boundary"))),
        "searches": float(len(events_of(events, "search_image")) + len(events_of(events, "search_text"))),
    }
