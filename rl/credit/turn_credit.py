"""Turn-level credit: an advantage estimator for verl (``algorithm.adv_estimator: turn_credit``).

The advantage of a token generated in turn t of episode i in GRPO group g is

    A(i, t) = A_ep(i) + w * A_step(i, t)

- ``A_ep(i)``: verl's GRPO outcome advantage of the episode reward (the paper's, with
  ``algorithm.norm_adv_by_std_in_grpo``).
- ``A_step(i, t) = G(i, t) - mean{ G(j, u) : j != i in g, anchor(j, u) = anchor(i, t) }``: the turn's step
  return ``G(i, t) = sum_{u >= t} gamma^(u - t) r(i, u)`` (``r``: the rubric's step rewards,
  ``ragym.rewards.steps``; ``gamma``: ``algorithm.gamma``) minus the mean step return of the turns of the *other*
  episodes of the group that faced the same anchor state (``ragym.envs.anchors``). No division by a standard
  deviation. 0 when no other episode of the group reached the anchor, or the turn has none.
- ``w``: ``ragym.turn_credit.step_weight``.

Why the baseline is unbiased: episodes of a group are sampled independently, so the baseline of (i, t) is a
function of other episodes only and does not depend on the action a(i, t); E[grad log pi(a | s) * b] = 0.
A baseline that included the turn's own return (a plain group mean, or normalising per turn index within
one episode) would not be; dividing by the anchor group's standard deviation rescales each group by a
statistic of its own returns (Dr. GRPO's bias). Observation tokens (mask 0) get no advantage.

verl hands a registered estimator only the rewards, the response mask, the group ids and the algorithm config;
the per-token turn ids, step rewards and anchors come as ``turn_credit=`` (the local engine) or from
``turn_credit_batch`` (a verl trainer that fetched them for the batch: ``ragym.rl.verl_plugin.turn_credit``).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

TURN_CREDIT = "turn_credit"
"""The estimator's ``algorithm.adv_estimator`` name."""


@dataclass(frozen=True)
class TurnCreditInputs:
    """Per-episode turn structure of a batch, row-aligned with the estimator's tensors."""

    turn_ids: Sequence[Sequence[int]]
    """Per episode, per response token: the policy turn that generated it, -1 for observation tokens."""
    step_rewards: Sequence[dict[int, float]]
    """Per episode: {turn: weighted step reward} (``ragym.rewards.steps.rubric_step_rewards``)."""
    anchors: Sequence[dict[int, str]]
    """Per episode: {turn: anchor state} (``ragym.envs.anchors.turn_anchors``)."""
    step_weight: float = 1.0
    """w: weight of the step advantage (``ragym.turn_credit.step_weight``)."""

    def __post_init__(self) -> None:
        sizes = {len(self.turn_ids), len(self.step_rewards), len(self.anchors)}
        if len(sizes) != 1:
            raise ValueError(f"turn credit: per-episode lists differ in length {sorted(sizes)}")


_BATCH: ContextVar[TurnCreditInputs | None] = ContextVar("turn_credit_batch", default=None)


@contextlib.contextmanager
def turn_credit_batch(inputs: TurnCreditInputs) -> Iterator[None]:
    """Make ``inputs`` the turn structure of the batch whose advantages verl computes inside the block."""
    token = _BATCH.set(inputs)
    try:
        yield
    finally:
        _BATCH.reset(token)


def step_returns(rewards: dict[int, float], turns: Sequence[int], gamma: float) -> dict[int, float]:
    """G(t) = sum over turns u >= t of gamma^(u - t) r(u), for each turn t in ``turns``.

    >>> step_returns({1: 1.0, 3: 0.5}, [0, 1, 2], 0.5)
    {0: 0.5625, 1: 1.125, 2: 0.25}
    """
    return {t: sum(r * gamma ** (u - t) for u, r in rewards.items() if u >= t) for t in turns}


def step_advantages(
    index: Sequence[Any] | np.ndarray, inputs: TurnCreditInputs, gamma: float
) -> list[dict[int, float]]:
    """A_step per episode and anchored turn: its step return minus the mean over other episodes' partners."""
    returns = [
        step_returns(r, list(a), gamma) for r, a in zip(inputs.step_rewards, inputs.anchors, strict=True)
    ]
    members: dict[tuple[Any, str], list[tuple[int, float]]] = defaultdict(list)
    for i, anchors in enumerate(inputs.anchors):
        for turn, anchor in anchors.items():
            members[(index[i], anchor)].append((i, returns[i][turn]))
    advantages: list[dict[int, float]] = [{} for _ in inputs.anchors]
    for i, anchors in enumerate(inputs.anchors):
        for turn, anchor in anchors.items():
            partners = [g for j, g in members[(index[i], anchor)] if j != i]
            advantages[i][turn] = returns[i][turn] - float(np.mean(partners)) if partners else 0.0
    return advantages


@core_algos.register_adv_est(TURN_CREDIT)
def compute_turn_credit_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    turn_credit: TurnCreditInputs | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO episode advantage plus the weighted step advantage of each token's turn: ([N, R], [N, R])."""
    inputs = turn_credit if turn_credit is not None else _BATCH.get()
    if inputs is None:
        raise ValueError(
            "adv_estimator=turn_credit needs the batch's turn ids, step rewards and anchors: the local engine "
            "passes them; under verl's trainer use trainer.v1.trainer_mode: ragym (or ragym_colocate_async, "
            "ragym_separate_async: ragym.rl.verl_plugin.turn_credit)"
        )
    num, width = response_mask.shape
    if len(inputs.turn_ids) != num:
        raise ValueError(f"turn credit: {len(inputs.turn_ids)} episodes of turn data for a batch of {num}")
    norm = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    gamma = 1.0 if config is None else float(config.get("gamma", 1.0))
    episode, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards, response_mask, index, norm_adv_by_std_in_grpo=norm
    )
    step = _token_steps(step_advantages(index, inputs, gamma), inputs.turn_ids, response_mask)  # [N, R]
    advantages = (episode + inputs.step_weight * step) * response_mask
    return advantages, advantages


def _token_steps(
    advantages: list[dict[int, float]], turn_ids: Sequence[Sequence[int]], response_mask: torch.Tensor
) -> torch.Tensor:
    """Each episode's per-turn step advantage spread over the tokens of that turn: [N, R]."""
    num, width = response_mask.shape
    ids = torch.full((num, width), -1, dtype=torch.long)  # [N, R]
    for i, turns in enumerate(turn_ids):
        if len(turns) > width:
            raise ValueError(
                f"turn credit: episode {i} has {len(turns)} turn ids for {width} response tokens"
            )
        ids[i, : len(turns)] = torch.as_tensor(list(turns), dtype=torch.long)
    untagged = (response_mask > 0) & (ids < 0)
    if untagged.any():
        row = int(untagged.any(-1).nonzero()[0])
        raise ValueError(f"turn credit: episode {row} has generated tokens (mask 1) without a turn id")
    step = torch.zeros((num, width), dtype=torch.float32)  # [N, R]
    for i, per_turn in enumerate(advantages):
        for turn, value in per_turn.items():
            step[i][ids[i] == turn] = value
    return step
