"""Step rewards: the share of a reward term each policy turn earned, for turn-level credit.

A step split of a registered reward is ``fn(episode, **params) -> {turn: value}`` (or None where the reward
is None) whose values sum to the reward's own value, so the episode total is unchanged. The rubric's step
rewards of an episode are the weighted splits of its terms that have one (``verification`` per decision,
MMAgent-R² Eq. 3-4; R3G's judge nDCG at the judge turn; MEMORA's action costs per action); terms without a
split (the outcome, format) reach the policy only through the episode advantage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragym.envs.events import events_of
from ragym.rewards.episode import Episode
from ragym.rewards.kbvqa import verification_decisions
from ragym.rewards.memora import CostParams
from ragym.rewards.r3g import r3g_judge_ndcg
from ragym.rewards.registry import get_reward
from ragym.rewards.rubric import Rubric

StepSplit = Callable[..., "dict[int, float] | None"]
"""``fn(episode, **params) -> {turn: value} | None``, summing to the reward's value."""

_SPLITS: dict[str, StepSplit] = {}


def register_step_split(reward: str) -> Callable[[StepSplit], StepSplit]:
    """Decorator: register the per-turn split of the registered reward ``reward`` (once per name)."""
    get_reward(reward)  # a split of an unknown reward is a bug here, not a silent no-op later

    def decorator(fn: StepSplit) -> StepSplit:
        if reward in _SPLITS:
            raise ValueError(
                f"a step split of {reward!r} is already registered ({_SPLITS[reward].__module__})"
            )
        _SPLITS[reward] = fn
        return fn

    return decorator


def _add(split: dict[int, float], turn: int, value: float) -> None:
    split[turn] = split.get(turn, 0.0) + value


@register_step_split("verification")
def verification_steps(episode: Episode, **params: Any) -> dict[int, float] | None:
    """rho of each counted Rerank/Reject decision at the turn that made it.

    >>> batch = {"type": "search_image", "turn": 0, "image": 1, "batch_id": 0, "candidates": ["e1"],
    ...          "gold_entity": "e9", "gold_in_batch": False, "offset": 0}
    >>> reject = {"type": "verification", "turn": 1, "decision": "reject", "entity": None, "image": 1,
    ...           "batch_id": 0, "candidates": ["e1"], "gold_entity": "e9", "gold_in_batch": False, "correct": True}
    >>> verification_steps(Episode("generic", ["", ""], [batch, reject], "x"), delta=0.2)
    {1: 0.2}
    """
    decisions = verification_decisions(episode, **params)
    if decisions is None:
        return None
    split: dict[int, float] = {}
    for turn, rho in decisions:
        _add(split, turn, rho)
    return split


@register_step_split("r3g_judge_ndcg")
def r3g_judge_steps(episode: Episode, **params: Any) -> dict[int, float] | None:
    """The judge nDCG at the judge turn (the turn that selected the evidence; unjudged: the last turn)."""
    value = r3g_judge_ndcg(episode, **params)
    if value is None:
        return None
    selected = events_of(episode.events, "evidence_selected")
    turn = selected[0]["turn"] if selected else max(len(episode.turns) - 1, 0)
    return {int(turn): value}


@register_step_split("memora_action_cost")
def memora_cost_steps(episode: Episode, **params: Any) -> dict[int, float] | None:
    """Minus each action's cost at its turn (sums to ``memora_action_cost``)."""
    cfg = CostParams(**params)
    split: dict[int, float] = {}
    for event in events_of(episode.events, "action"):
        _add(split, int(event["turn"]), 0.0 - getattr(cfg, event["kind"]))
    return split


def rubric_step_rewards(rubric: Rubric, episode: Episode) -> dict[int, float]:
    """Weighted per-turn step rewards of ``episode`` under ``rubric``: {turn: sum of weight x split}.

    Empty for an episode the env ended by raising (the rubric scores it 0 and no term applies).
    """
    if events_of(episode.events, "episode_error"):
        return {}
    steps: dict[int, float] = {}
    for term in rubric.terms:
        split_fn = _SPLITS.get(term.reward)
        if split_fn is None or (
            term.data_sources is not None and episode.data_source not in term.data_sources
        ):
            continue
        split = split_fn(episode, **term.params)
        for turn, value in (split or {}).items():
            _add(steps, turn, term.weight * value)
    return steps
