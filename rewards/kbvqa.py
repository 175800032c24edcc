"""KB-VQA's reward terms: the step-level verification reward (MMAgent-R² Eq. 3-4) and the retrieval recall of
served candidate batches; and KB-VQA's check of a turn the env never saw, for the generic ``format``.

The composite reward of the paper (Eq. 2) is these with the generic ``outcome`` and ``format``
(``ragym.rewards.generic``). All are computed from the env's events only (``ragym.envs.kbvqa.events``). Correctness is recomputed from the batch the env served
(its ``search_image`` event), not taken from a ``correct`` flag, and at most one decision per
(image, batch) counts, so even a misbehaving env cannot let a policy farm reward by repeating
``Rerank(e*)`` or rejecting beyond ``Rej_max``. Whether a Reject at the limit (issued when its image's
RejCount already equals Rej_max, which Algorithm S1 answers with the boundary prompt and does not count) is
paid is the recipe's ``pay_reject_at_limit``; it too is recomputed from the decisions, not taken from the
event's flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ragym.envs.events import events_of
from ragym.envs.kbvqa.actions import ParseError, parse_action
from ragym.envs.kbvqa.metrics import rejects_at_limit
from ragym.rewards.episode import Episode
from ragym.rewards.generic import register_turn_check
from ragym.rewards.registry import register_reward

BatchKey = tuple[Any, Any]
"""(query image index, batch id)."""


@dataclass(frozen=True)
class VerificationParams:
    """Recipe parameters of ``verification``."""

    delta: float = 0.2
    """rho for a correct ``Reject()`` (gold entity not in the batch); paper Eq. 4 and Table 8: 0.2."""
    max_rejections: int | None = None
    """The env's rejection limit: only the first ``max_rejections + 1`` batches served per image (the initial one
    plus one per rejection or repeated SearchImage) can earn reward. Null reads it from the episode's ``task`` event (the limit the
    env ran with); set, it must equal that limit (a mismatch raises), so a Rej_max sweep cannot be scored
    with another limit. Null with no ``task`` event trusts the env to serve no more."""
    pay_reject_at_limit: bool = False
    """Pay a Reject() issued when its image's RejCount (its counted Rejects) already equals Rej_max like
    any other: delta when the gold is not in the batch. Algorithm S1 (lines 14-20) answers that Reject with
    the boundary prompt and does not count it as a rejection, so by default it earns nothing: a policy that
    rejects every batch is not paid for a Reject that changed nothing, and at Rej_max = 0 (Table 7) no Reject
    is paid. True reads Eq. 4's "every verification decision" as including it (docs/rewards.md)."""
    pay_reject_after_confirm: bool = True
    """Pay a Reject() on a batch of an image whose gold entity an earlier Rerank already confirmed, as Eq. 4
    does (e* is not in that batch). Batches do not overlap, so every batch after the confirmation lacks e* and
    such a Reject is always "correct": a policy that confirms e*, pages on with SearchImage(j) and rejects
    earns 1 + Rej_max * delta for the image instead of 1. False pays it nothing (docs/rewards.md)."""

    def __post_init__(self) -> None:
        if (
            isinstance(self.delta, bool)
            or not isinstance(self.delta, (int, float))
            or not math.isfinite(self.delta)
            or self.delta < 0
        ):
            # A negative delta would make a correct Reject() cost reward: the opposite of Eq. 4.
            raise ValueError(f"delta must be a finite number >= 0, got {self.delta!r}")
        if self.max_rejections is not None and (
            not isinstance(self.max_rejections, int) or self.max_rejections < 0
        ):
            raise ValueError(f"max_rejections must be null or an int >= 0, got {self.max_rejections!r}")
        if not isinstance(self.pay_reject_at_limit, bool):
            raise ValueError(f"pay_reject_at_limit must be true or false, got {self.pay_reject_at_limit!r}")
        if not isinstance(self.pay_reject_after_confirm, bool):
            raise ValueError(
                f"pay_reject_after_confirm must be true or false, got {self.pay_reject_after_confirm!r}"
            )


@register_turn_check("kbvqa")
def kbvqa_turn_parses(episode: Episode, text: str) -> bool:
    """KB-VQA's grammar with the action set the episode ran with (no ``Reject()`` under ``allow_reject=False``).

    >>> task = {"type": "task", "turn": -1, "allow_reject": False}
    >>> turn = "<reason>no match</reason><rerank>Reject()</rerank>"
    >>> [kbvqa_turn_parses(Episode("generic", [], events, "x"), turn) for events in ([], [task])]
    [True, False]
    """
    allow_reject = all(task.get("allow_reject", True) for task in events_of(episode.events, "task"))
    return not isinstance(parse_action(text, allow_reject=allow_reject), ParseError)


def served_batches(episode: Episode, max_rejections: int | None = None) -> dict[BatchKey, dict[str, Any]]:
    """The candidate batches the env served, by (image, batch id), capped at ``max_rejections + 1`` per image."""
    batches: dict[BatchKey, dict[str, Any]] = {}
    per_image: dict[Any, int] = {}
    for event in events_of(episode.events, "search_image"):
        key = (event["image"], event["batch_id"])
        if key in batches:
            continue
        per_image[event["image"]] = per_image.get(event["image"], 0) + 1
        if max_rejections is not None and per_image[event["image"]] > max_rejections + 1:
            continue
        batches[key] = event
    return batches


def episode_max_rejections(episode: Episode, max_rejections: int | None) -> int | None:
    """The rejection limit to score with: the episode's own (``task`` event), checked against ``max_rejections``."""
    tasks = events_of(episode.events, "task")
    ran_with = tasks[0]["max_rejections"] if tasks else None
    if max_rejections is not None and ran_with is not None and max_rejections != ran_with:
        raise ValueError(
            f"verification reward: the reward's max_rejections={max_rejections} but the episode ran with "
            f"max_rejections={ran_with}; set the reward's to the env's (or null to read it from the episode)"
        )
    return ran_with if ran_with is not None else max_rejections


def _rho(decision: dict[str, Any], batch: dict[str, Any], delta: float) -> float:
    """Eq. 4: 1 for Rerank(e*), delta for Reject() when e* is not in the batch, 0 otherwise."""
    gold, candidates = batch["gold_entity"], list(batch["candidates"])
    if decision["decision"] == "rerank":
        return 1.0 if decision.get("entity") == gold and gold in candidates else 0.0
    if decision["decision"] == "reject":
        return float(delta) if gold not in candidates else 0.0
    return 0.0


@register_reward("verification", params=VerificationParams)
def verification(episode: Episode, **params: Any) -> float | None:
    """R_ver (Eq. 3): sum of rho over the first decision on each served batch of every query image; a Reject
    at the limit counts only with ``pay_reject_at_limit``, one after its image's e* was confirmed only with
    ``pay_reject_after_confirm``, and a Reject of an episode run without the Reject action (``allow_reject=False``)
    never does.

    None when no served batch has a gold entity (nothing to verify against).

    >>> batch = {"type": "search_image", "turn": 0, "image": 0, "batch_id": 0, "candidates": ["e1", "e2"],
    ...          "gold_entity": "e9", "gold_in_batch": False, "offset": 0}
    >>> reject = {"type": "verification", "turn": 1, "decision": "reject", "entity": None, "image": 0,
    ...           "batch_id": 0, "candidates": ["e1", "e2"], "gold_entity": "e9", "gold_in_batch": False,
    ...           "correct": True}
    >>> verification(Episode("generic", ["", ""], [batch, reject, reject], "x"), delta=0.2)
    0.2
    """
    decisions = verification_decisions(episode, **params)
    return None if decisions is None else sum((rho for _, rho in decisions), 0.0)


def verification_decisions(episode: Episode, **params: Any) -> list[tuple[int, float]] | None:
    """(turn, rho) of every counted decision, in order: ``verification``'s terms, for per-turn credit.

    None when no served batch has a gold entity (as ``verification``).
    """
    cfg = VerificationParams(**params)
    max_rejections = episode_max_rejections(episode, cfg.max_rejections)
    batches = served_batches(episode, max_rejections)
    if not any(batch.get("gold_entity") is not None for batch in batches.values()):
        return None
    # Without the Reject action (Table 5's "w/o Reject") no Reject is paid, even one a broken env recorded.
    rejects_pay = all(task.get("allow_reject", True) for task in events_of(episode.events, "task"))
    at_limit = set() if cfg.pay_reject_at_limit else _rejects_at_limit(episode, max_rejections)
    counted, decided, confirmed = [], set(), set()
    for decision in events_of(episode.events, "verification"):
        key = (decision["image"], decision["batch_id"])
        if key in decided:
            continue
        decided.add(key)
        batch = batches.get(key)
        # A decision on a batch that was never served (or lies beyond Rej_max) earns nothing.
        if batch is None or batch.get("gold_entity") is None:
            continue
        after_confirm = not cfg.pay_reject_after_confirm and key[0] in confirmed
        if decision["decision"] == "reject" and (not rejects_pay or key in at_limit or after_confirm):
            continue
        rho = _rho(decision, batch, cfg.delta)
        if decision["decision"] == "rerank" and rho > 0:
            confirmed.add(key[0])
        counted.append((int(decision["turn"]), rho))
    return counted


def _rejects_at_limit(episode: Episode, max_rejections: int | None) -> set[BatchKey]:
    """The batches whose Reject is at the limit (issued when the image's RejCount already equalled Rej_max),
    or, with no known limit, the ones whose Reject the env flagged ``at_limit``."""
    if max_rejections is not None:
        return rejects_at_limit(episode.events, max_rejections)
    decisions = events_of(episode.events, "verification")
    return {(d["image"], d["batch_id"]) for d in decisions if d.get("at_limit")}


@dataclass(frozen=True)
class RetrievalRecallParams:
    """Recipe parameters of ``retrieval_recall``."""

    k: int | None = None
    """Count the gold entity only when its rank in the image's full ranking is below k; null: any served rank."""

    def __post_init__(self) -> None:
        if self.k is not None and (not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1):
            raise ValueError(f"k must be null or a positive int, got {self.k!r}")


@register_reward("retrieval_recall", params=RetrievalRecallParams)
def retrieval_recall(episode: Episode, **params: Any) -> float | None:
    """Share of query images whose gold entity appeared in a served batch within the first k candidates.

    Only images with a served batch count (events do not list images that were never searched); 0 when
    nothing was served, None when no served batch has a gold entity.

    >>> batch = {"type": "search_image", "turn": 0, "image": 0, "batch_id": 0, "candidates": ["e1", "e2"],
    ...          "gold_entity": "e2", "gold_in_batch": True, "offset": 5}
    >>> ep = Episode("generic", [""], [batch], "x")
    >>> retrieval_recall(ep), retrieval_recall(ep, k=5), retrieval_recall(ep, k=7)
    (1.0, 0.0, 1.0)
    """
    cfg = RetrievalRecallParams(**params)
    batches = list(events_of(episode.events, "search_image"))
    if not batches:
        return 0.0
    found: dict[Any, bool] = {}
    for batch in batches:
        gold = batch.get("gold_entity")
        if gold is None:
            continue
        candidates = list(batch["candidates"])
        rank = batch.get("offset", 0) + candidates.index(gold) if gold in candidates else None
        hit = rank is not None and (cfg.k is None or rank < cfg.k)
        found[batch["image"]] = found.get(batch["image"], False) or hit
    if not found:
        return None
    return sum(found.values()) / len(found)
