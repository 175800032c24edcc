"""Every episode metric, computed from the episode's events alone.

One definition serves training logs (``ragym.rl.engine``), ``ragym eval``, ``ragym rollout``, the demo and the
agent loop's ``extra_fields``. ``episode_metrics(env_id, events)`` returns the metrics every env shares
(turns, the action histogram, format errors, ...) plus the env's own, registered with
``@register_metrics(env_id, action_kinds=...)``. A value is None where it does not apply (Ident. without
gold entities); ``mean_metrics`` averages each metric over the episodes where it applies.

The file has one section per environment: a new env appends its registration at the end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragym.envs.events import Event, events_of

POLICY_TRUNCATIONS = ("max_response_length", "generated_vision_token")
"""Loop truncations the policy's own tokens cause (its generation filled the response length, or it generated
a token only the processor may place); an observation that did not fit is the env's (and the image budget's)."""

Metrics = dict[str, float | None]
"""Metric name -> value (None: does not apply to this episode)."""
MetricFn = Callable[[list[Event]], Metrics]


@dataclass(frozen=True)
class EnvMetrics:
    """One env's metric registration."""

    action_kinds: tuple[str, ...]
    """Every ``action`` event kind the env records (``invalid`` included): the histogram's fixed keys."""
    fn: MetricFn
    """The env's own metrics from its events."""


_REGISTRY: dict[str, EnvMetrics] = {}


def register_metrics(env_id: str, action_kinds: tuple[str, ...]) -> Callable[[MetricFn], MetricFn]:
    """Register ``fn`` as ``env_id``'s episode metrics; a duplicate env id is an error."""

    def wrap(fn: MetricFn) -> MetricFn:
        if env_id in _REGISTRY:
            raise ValueError(f"episode metrics for {env_id!r} are already registered")
        _REGISTRY[env_id] = EnvMetrics(tuple(action_kinds), fn)
        return fn

    return wrap


def registered_metrics() -> dict[str, EnvMetrics]:
    """Every env id with registered metrics."""
    return dict(_REGISTRY)


def episode_metrics(env_id: str, events: list[Event]) -> Metrics:
    """All metrics of one episode of ``env_id``: the shared ones, then the env's own."""
    if env_id not in _REGISTRY:
        raise KeyError(f"no episode metrics registered for {env_id!r}; registered: {sorted(_REGISTRY)}")
    entry = _REGISTRY[env_id]
    if events_of(events, "episode_error"):
        # The env raised: its own metrics need events the episode never reached, so they do not apply.
        return shared_metrics(events, entry.action_kinds)
    return {**shared_metrics(events, entry.action_kinds), **entry.fn(events)}


def shared_metrics(events: list[Event], action_kinds: tuple[str, ...]) -> Metrics:
    """Turns, the action histogram, format errors, violations, truncation (any, by the policy's own tokens, by an
    observation that did not fit, by one whose images did: the image budget's share), whether the policy answered, and
    searches the retrieval service could not answer (``retrieval_errors``), and whether the env raised and ended
    the episode (``errors``: an ``episode_error`` event).

    ``turns`` counts every policy turn an event names, the one the agent loop cut included.

    >>> from envs import events as ev
    >>> shared_metrics([ev.action(0, "answer", True), ev.answer(0, "x")], ("answer", "invalid"))["turns"]
    1.0
    """
    kinds = Counter(e["kind"] for e in events_of(events, "action"))
    unknown = set(kinds) - set(action_kinds)
    if unknown:
        raise ValueError(f"action kinds {sorted(unknown)} are not among the registered {list(action_kinds)}")
    turns = 1 + max((e["turn"] for e in events), default=-1)
    answers = events_of(events, "answer")
    cuts = events_of(events, "truncated")
    metrics: Metrics = {
        "turns": float(max(turns, 0)),
        "format_errors": float(len(events_of(events, "format_error"))),
        "protocol_violations": float(len(events_of(events, "protocol_violation"))),
        "truncated": float(bool(cuts)),
        "truncated_by_policy": float(
            any(c["reason"] in POLICY_TRUNCATIONS and "observation_tokens" not in c for c in cuts)
        ),
        "truncated_by_observation": float(any("observation_tokens" in c for c in cuts)),
        "truncated_by_images": float(any(c.get("visual_tokens", 0) > 0 for c in cuts)),
        "answered": float(any(not a["forced"] for a in answers)),
        "retrieval_errors": float(len(events_of(events, "retrieval_error"))),
        "errors": float(bool(events_of(events, "episode_error"))),
    }
    metrics.update({f"actions/{kind}": float(kinds[kind]) for kind in action_kinds})
    return metrics


def mean_metrics(per_episode: list[Metrics]) -> Metrics:
    """The mean of each metric over the episodes where it applies (None where it applies to none)."""
    keys = sorted({k for m in per_episode for k in m})
    means: Metrics = {}
    for key in keys:
        values = [m[key] for m in per_episode if m.get(key) is not None]
        means[key] = sum(values) / len(values) if values else None
    return means


def _only(events: list[Event], kind: str, env_id: str) -> dict[str, Any]:
    found = events_of(events, kind)
    if len(found) != 1:
        raise ValueError(f"{env_id} episode metrics need exactly one {kind!r} event, got {len(found)}")
    return found[0]


# ===== KBVQA-v0 ==========================================================================================
KBVQA_ACTION_KINDS = ("search_image", "search_text", "rerank", "reject", "answer", "invalid")


@register_metrics("KBVQA-Demo-v0", action_kinds=KBVQA_ACTION_KINDS)  # the same episodes, with demo aids
@register_metrics("KBVQA-v0", action_kinds=KBVQA_ACTION_KINDS)
def kbvqa_metrics(events: list[Event]) -> Metrics:
    """Ident. (MMAgent-R² 4.2.2: 1 only when every query image's confirmed entity is its gold entity),
    the share of images identified, rejections (and needless ones), verification accuracy, boundary prompts and searches.

    An image's confirmed entity is its last Rerank; correctness is recomputed from gold and candidates.
    """
    task = _only(events, "task", "KBVQA-v0")
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


# ===== DocMemo-v0 ========================================================================================
@register_metrics("DocMemo-v0", action_kinds=("select", "refine", "answer", "invalid"))
def docmemo_metrics(events: list[Event]) -> Metrics:
    """Rounds run, pages accumulated, distinct evidence pages shown, refinements, pages marked useful /
    irrelevant, and whether the answer declared the question not answerable (None without an answer)."""
    selected = events_of(events, "selected")
    feedback = events_of(events, "feedback")
    answers = events_of(events, "answer")
    return {
        "rounds": float(len(events_of(events, "candidates"))),
        "pages_accumulated": float(len(selected[-1]["accumulated"])) if selected else 0.0,
        "evidence_pages": float(len({p for e in events_of(events, "evidence") for p in e["pages"]})),
        "refinements": float(len(feedback)),
        "pages_marked_useful": float(sum(len(f["useful"]) for f in feedback)),
        "pages_marked_irrelevant": float(sum(len(f["irrelevant"]) for f in feedback)),
        "not_answerable": float(answers[-1]["not_answerable"]) if answers else None,
    }


# ===== MEMORA-v0 =========================================================================================
@register_metrics("MEMORA-v0", action_kinds=("decompose", "subquery", "extract", "judge", "stop", "invalid"))
def memora_metrics(events: list[Event]) -> Metrics:
    """nDCG@K of the final ranking beside the first stage's (None without qrels or a final ranking), memory
    hits and records at reset, whether memory was written, actions, pool growth, factors, evidence edges,
    whether the judge ran, and whether a budget forced the ranking."""
    read = _only(events, "memory_read", "MEMORA-v0")
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


# ===== R3G-v0 ============================================================================================
R3G_ACTION_KINDS = ("plan", "retrieve", "judge", "answer", "invalid")
"""Every ``action`` kind R3G-v0 records."""
RECALL_KS = (1, 3, 5)
"""The paper's Recall@K cut-offs."""


@register_metrics("R3G-v0", action_kinds=R3G_ACTION_KINDS)
def r3g_metrics(events: list[Event]) -> Metrics:
    """Recall@1/3/5 of the final pool ranking (R3G: any gold image in the top K; 0 without a ranking), gold in
    the pool, evidence recall (the selected top k), judge errors, and whether the plan came before retrieval.

    Gold images come from the ``r3g_task`` event; None where the row has none.

    >>> from ragym.envs.events import evidence_selected, plan, r3g_task
    >>> evs = [r3g_task(["g"], "Angle", 5, 1, "fused", True), plan(0, "p"),
    ...        evidence_selected(2, ["x", "g"], [0.6, 0.4], [0.1, 0.9], [0.7, 1.3], [1], ["g"], "fused")]
    >>> m = r3g_metrics(evs); m["recall@1"], m["evidence_recall"], m["plan_first"]
    (1.0, 1.0, 1.0)
    """
    task = events_of(events, "r3g_task")
    if len(task) != 1:
        raise ValueError(f"R3G-v0 episode metrics need exactly one 'r3g_task' event, got {len(task)}")
    gold = set(task[0]["gold_images"])
    selected = events_of(events, "evidence_selected")
    retrieval = events_of(events, "coarse_retrieval")
    plans = events_of(events, "plan")
    ranking = selected[0]["ranking"] if selected else []
    chosen = selected[0]["selected"] if selected else []

    def hit(ids: list[str]) -> float | None:
        return float(bool(gold & set(ids))) if gold else None

    metrics: Metrics = {f"recall@{k}": hit(ranking[:k]) for k in RECALL_KS}
    metrics.update({
        "evidence_recall": hit(chosen),
        "gold_in_pool": hit(retrieval[0]["pool"]) if retrieval else (0.0 if gold else None),
        "judge_errors": float(len(events_of(events, "judge_error"))),
        "plan_first": float(bool(plans) and (not retrieval or plans[0]["turn"] < retrieval[0]["turn"]))
        if task[0]["use_plan"] else None,
    })  # fmt: skip
    return metrics
