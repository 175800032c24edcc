"""MEMORA-v0 reward terms: nDCG@10 of the final ranking, per-action cost, format, and logged-only terms.

Ground truth is ``{"qrels": {docid: relevance}, "excluded_ids": [docid, ...]}`` (BRIGHT: gold ids get
relevance 1, excluded ids are removed from rankings before the cut-off). The ranking terms read the
``final_ranking`` and ``first_stage`` events (``ragym.envs.memora.events``) and score them with
``ragym.envs.retrieval.ranking.ndcg_at_k`` (trec_eval parity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragym.envs.events import events_of
from ragym.envs.memora.actions import ParseError, parse_action
from ragym.envs.retrieval.ranking import ndcg_at_k
from ragym.rewards.episode import Episode
from ragym.rewards.registry import register_reward
from ragym.rewards.turn_format import TurnFormatParams, parses_with, turn_format_score

_PARSES = parses_with(parse_action, ParseError)


def _truth(episode: Episode) -> tuple[dict[str, int], set[str]]:
    truth = episode.ground_truth
    if not isinstance(truth, dict) or not isinstance(truth.get("qrels"), dict):
        raise ValueError(f"{episode.data_source}: MEMORA rewards need ground_truth.qrels, got {truth!r}")
    return {str(d): int(r) for d, r in truth["qrels"].items()}, {
        str(d) for d in truth.get("excluded_ids") or []
    }


def ranking_ndcg(ranking: Sequence[str], qrels: dict[str, int], excluded: set[str], k: int) -> float:
    """nDCG@k of a ranked list of doc ids after removing excluded ids (BRIGHT's rule).

    >>> ranking_ndcg(["x", "a", "b"], {"b": 1}, {"x"}, 10)
    0.6309297535714575
    """
    kept = [d for d in ranking if d not in excluded][:k]
    run = {"q": {d: float(len(kept) - i) for i, d in enumerate(kept)}}
    return ndcg_at_k(run, {"q": qrels}, k=k)["q"]


@dataclass(frozen=True)
class NdcgParams:
    """Recipe parameters of ``memora_ndcg`` and ``memora_first_stage_ndcg``."""

    k: int = 10
    """Cut-off (the paper reports nDCG@10)."""
    unfinished: float = 0.0
    """Score of an episode without a final ranking (the agent loop cut it before the env could rank)."""


@register_reward("memora_ndcg", params=NdcgParams)
def memora_ndcg(episode: Episode, **params: Any) -> float | None:
    """nDCG@k of the env's final ranking.

    >>> ev = [{"type": "final_ranking", "turn": 2, "ranking": ["a", "b"], "scores": [2.0, 1.0], "k": 10,
    ...        "forced": False, "margin": 0.1, "support": 0.5}]
    >>> memora_ndcg(Episode("bright", ["t"] * 3, ev, {"qrels": {"b": 1}}))
    0.6309297535714575
    """
    cfg = NdcgParams(**params)
    qrels, excluded = _truth(episode)
    final = events_of(episode.events, "final_ranking")
    if not final:
        return cfg.unfinished
    return ranking_ndcg(final[-1]["ranking"], qrels, excluded, cfg.k)


@register_reward("memora_first_stage_ndcg", params=NdcgParams)
def memora_first_stage_ndcg(episode: Episode, **params: Any) -> float | None:
    """nDCG@k of the first stage's own ranking on the same query (log it with weight 0); None without one.

    >>> ev = [{"type": "first_stage", "turn": -1, "query_id": "q", "ranking": ["b", "a"], "scores": [2.0, 1.0]}]
    >>> memora_first_stage_ndcg(Episode("bright", [], ev, {"qrels": {"b": 1}}))
    1.0
    """
    cfg = NdcgParams(**params)
    qrels, excluded = _truth(episode)
    first = events_of(episode.events, "first_stage")
    return ranking_ndcg(first[0]["ranking"], qrels, excluded, cfg.k) if first else None


@dataclass(frozen=True)
class CostParams:
    """Recipe parameters of ``memora_action_cost``: the cost of one action of each kind."""

    decompose: float = 0.0
    """Cost of a decompose call."""
    subquery: float = 0.01
    """Cost of a subquery (one retrieval)."""
    extract: float = 0.01
    """Cost of an extract call (one LLM call over many documents in the paper)."""
    judge: float = 0.02
    """Cost of a judge call."""
    stop: float = 0.0
    """Cost of stopping."""
    invalid: float = 0.0
    """Cost of an unparsable turn (the format term already punishes it)."""


@register_reward("memora_action_cost", params=CostParams)
def memora_action_cost(episode: Episode, **params: Any) -> float | None:
    """Minus the summed cost of the episode's actions (add it with weight 1).

    >>> ev = [{"type": "action", "turn": 0, "kind": "subquery", "well_formed": True},
    ...       {"type": "action", "turn": 1, "kind": "judge", "well_formed": True}]
    >>> memora_action_cost(Episode("bright", ["a", "b"], ev, {"qrels": {}}))
    -0.03
    """
    cfg = CostParams(**params)
    total = sum(getattr(cfg, e["kind"]) for e in events_of(episode.events, "action"))
    return 0.0 - round(total, 10)


FormatParams = TurnFormatParams
"""Recipe parameters of ``memora_format`` (shared with the other per-turn format rewards)."""


@register_reward("memora_format", params=FormatParams)
def memora_format(episode: Episode, **params: Any) -> float | None:
    """Whether every turn followed the MEMORA grammar and protocol (binary) or the share that did.

    >>> ev = [{"type": "action", "turn": 0, "kind": "stop", "well_formed": True}]
    >>> memora_format(Episode("bright", ["<reason>r</reason><stop></stop>"], ev, {"qrels": {}}))
    1.0
    """
    return turn_format_score(episode, FormatParams(**params), _PARSES)


@register_reward("memora_num_actions")
def memora_num_actions(episode: Episode) -> float | None:
    """Actions in the episode (log it with weight 0).

    >>> memora_num_actions(Episode("bright", ["t"], [{"type": "action", "turn": 0, "kind": "stop", "well_formed": True}], {}))
    1.0
    """
    return float(len(events_of(episode.events, "action")))


@register_reward("memora_memory_hits")
def memora_memory_hits(episode: Episode) -> float | None:
    """Memories shown at reset (log it with weight 0); None when the episode has no memory read.

    >>> ev = [{"type": "memory_read", "turn": -1, "domain": "d", "num_records": 9, "hits": 2,
    ...        "similarities": [0.9, 0.5], "queries": ["a", "b"]}]
    >>> memora_memory_hits(Episode("bright", [], ev, {}))
    2.0
    """
    reads = events_of(episode.events, "memory_read")
    return float(reads[0]["hits"]) if reads else None
