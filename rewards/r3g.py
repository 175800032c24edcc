"""R3G reward terms: evidence recall@k, format, and the judge term (nDCG of the fused pool ranking).

Answer correctness is the shared ``outcome`` term: this module registers the multiple-choice scorer
(``ragym.rewards.choices``) for the R3G data sources, so ``outcome`` and ``ragym eval`` score the option letter.
All terms read ``episode.events`` (vocabulary in ``ragym.envs.r3g.events``) and the ground truth
``{"answer_choice", "answer", "options", "gold_images", "scenario"}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragym.envs.events import events_of
from ragym.envs.retrieval.ranking import ndcg_at_k
from ragym.rewards.answers import register_answer_scorer
from ragym.rewards.choices import score_choice
from ragym.rewards.episode import Episode
from ragym.rewards.registry import register_reward

R3G_DATA_SOURCES = ("mragbench", "synthetic_r3g")
for _source in R3G_DATA_SOURCES:
    register_answer_scorer(_source, score_choice)


def gold_images(episode: Episode) -> set[str]:
    """The ground-truth evidence ids (from the ground truth; an error names the episode's source)."""
    truth = episode.ground_truth
    if not isinstance(truth, dict) or "gold_images" not in truth:
        raise ValueError(f"{episode.data_source}: R3G rewards need ground_truth.gold_images, got {truth!r}")
    return {str(g) for g in truth["gold_images"]}


def _check_k(k: int | None) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be null or a positive int, got {k!r}")


@dataclass(frozen=True)
class RecallParams:
    """Recipe parameters of ``r3g_evidence_recall``."""

    k: int | None = None
    """Top k of the fused ranking; null: the evidence the env selected (its own k)."""
    mode: str = "hit"
    """``hit``: 1 when any gold image is in the top k (R3G's Recall@K); ``fraction``: share of gold found."""

    def __post_init__(self) -> None:
        _check_k(self.k)
        if self.mode not in ("hit", "fraction"):
            raise ValueError(f"mode must be 'hit' or 'fraction', got {self.mode!r}")


def ranked_evidence(episode: Episode, k: int | None) -> list[str] | None:
    """The top ``k`` of the episode's final pool ranking (None for ``k``: the selected evidence);
    None when no evidence was ever selected."""
    selected = events_of(episode.events, "evidence_selected")
    if not selected:
        return None
    return list(selected[0]["selected"]) if k is None else list(selected[0]["ranking"][:k])


@register_reward("r3g_evidence_recall", params=RecallParams)
def r3g_evidence_recall(episode: Episode, **params: Any) -> float | None:
    """Recall@k of the evidence against the gold images; 0 when none was selected, None without gold.

    >>> ev = [{"type": "evidence_selected", "turn": 2, "selected": ["x"], "ranking": ["x", "g"]}]
    >>> ep = Episode("synthetic_r3g", [], ev, {"gold_images": ["g"]})
    >>> r3g_evidence_recall(ep), r3g_evidence_recall(ep, k=2)
    (0.0, 1.0)
    """
    cfg = RecallParams(**params)
    gold = gold_images(episode)
    if not gold:
        return None
    top = ranked_evidence(episode, cfg.k)
    if top is None:
        return 0.0
    found = len(gold & set(top))
    return float(found > 0) if cfg.mode == "hit" else found / len(gold)


@dataclass(frozen=True)
class FormatParams:
    """Recipe parameters of ``r3g_format``."""

    mode: str = "binary"
    """``binary``: 1 only when every turn is accepted; ``fraction``: the share of accepted turns."""
    count_violations: bool = True
    """Well-formed turns the protocol rejected (retrieval before the plan...) count as bad turns."""
    count_judge_errors: bool = True
    """A judge turn with any per-candidate error (missing or out-of-range score) counts as a bad turn."""

    def __post_init__(self) -> None:
        if self.mode not in ("binary", "fraction"):
            raise ValueError(f"mode must be 'binary' or 'fraction', got {self.mode!r}")


@register_reward("r3g_format", params=FormatParams)
def r3g_format(episode: Episode, **params: Any) -> float | None:
    """Every turn followed the grammar and the protocol (binary), or the share that did (fraction).

    >>> ev = [{"type": "action", "turn": 0, "kind": "retrieve", "well_formed": True},
    ...       {"type": "protocol_violation", "turn": 0, "reason": "retrieve_before_plan"},
    ...       {"type": "action", "turn": 1, "kind": "plan", "well_formed": True}]
    >>> ep = Episode("synthetic_r3g", ["t0", "t1"], ev, {"gold_images": []})
    >>> r3g_format(ep), r3g_format(ep, mode="fraction"), r3g_format(ep, count_violations=False)
    (0.0, 0.5, 1.0)
    """
    cfg = FormatParams(**params)
    good = {e["turn"]: bool(e["well_formed"]) for e in events_of(episode.events, "action")}
    bad_kinds = (["protocol_violation"] if cfg.count_violations else []) + (
        ["judge_error"] if cfg.count_judge_errors else []
    )
    for kind in bad_kinds:
        for e in events_of(episode.events, kind):
            good[e["turn"]] = False
    # Turns the env never saw (a reply cut by the length budget) are bad turns.
    for t in range(len(episode.turns)):
        good.setdefault(t, False)
    if not good:
        return None
    flags = list(good.values())
    return float(all(flags)) if cfg.mode == "binary" else sum(flags) / len(flags)


@dataclass(frozen=True)
class JudgeParams:
    """Recipe parameters of ``r3g_judge_ndcg``."""

    k: int | None = None
    """nDCG cut-off; null: the whole pool."""
    unjudged: float = 0.0
    """Value when the pool was retrieved but never judged (the episode ended first)."""

    def __post_init__(self) -> None:
        _check_k(self.k)


@register_reward("r3g_judge_ndcg", params=JudgeParams)
def r3g_judge_ndcg(episode: Episode, **params: Any) -> float | None:
    """nDCG of the final pool ranking against the gold images in the pool (1 = gold ranked first).

    None where the judge has nothing to earn: no gold image in the pool, no retrieval, or runs without a judge
    turn (Stage-1 only, or MRAG's no reranking).

    >>> ev = [{"type": "coarse_retrieval", "turn": 1, "pool": ["x", "g"], "gold_in_pool": True},
    ...       {"type": "evidence_selected", "turn": 2, "ranking": ["x", "g"], "selected": ["x"], "rerank": "fused"}]
    >>> round(r3g_judge_ndcg(Episode("synthetic_r3g", [], ev, {"gold_images": ["g"]})), 4)
    0.6309
    """
    cfg = JudgeParams(**params)
    retrieval = events_of(episode.events, "coarse_retrieval")
    if not retrieval:
        return None
    in_pool = gold_images(episode) & set(retrieval[0]["pool"])
    selected = events_of(episode.events, "evidence_selected")
    if not in_pool or (selected and selected[0]["rerank"] in ("stage1", "none")):  # no judge turn
        return None
    if not selected:
        return cfg.unjudged
    ranking = selected[0]["ranking"]
    run = {"q": {docid: float(len(ranking) - rank) for rank, docid in enumerate(ranking)}}
    return ndcg_at_k(run, {"q": dict.fromkeys(in_pool, 1)}, cfg.k or len(ranking))["q"]
