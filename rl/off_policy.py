"""Staleness of trajectories under asynchronous rollouts, counted alike by verl's trainer modes and the local engine.

Weight version v is the policy after training step v (version 0: the initial weights); the trainer of step ``s``
(1-based, verl's ``global_steps``) holds version ``s - 1``. A trajectory records the first and last version its
turns came from. The staleness bound is verl's ``trainer.v1.sampler.max_off_policy_threshold`` (``STALENESS_KEY``):
the most versions a trajectory may span from its prompt's dispatch to the step that trains on it, so a trajectory a
step trains on is at most ``bound - 1`` updates old; an older one is dropped and counted, never trained on.

A trajectory that is trained on anyway comes from another policy than the trainer's (older weights, or a rollout
engine with kernels of its own): ``CORRECTION_KEY`` is the one switch of the importance-sampling correction for it,
resolved here alike for both engines (``correction_level``); the weights and metrics are ``ragym.rl.correction``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from omegaconf import OmegaConf

STALENESS_KEY = "trainer.v1.sampler.max_off_policy_threshold"
"""The staleness bound, one key for both engines' async modes: the most weight versions a trajectory may span,
counted from the step its prompt was dispatched (verl's ``ReplayBufferAsync`` drops and counts older ones, or waits
for them: ``max_off_policy_strategy``); ``staleness_problem`` is its one check."""


def staleness_problem(bound: Any) -> str | None:
    """Why ``bound`` cannot be the staleness bound of an async run (None: it can): it must be a positive integer
    (null is unbounded, a trajectory of any age would be trained on; below 1 no trajectory could be).

    >>> staleness_problem(2) is None, staleness_problem(None) is not None, staleness_problem(0) is not None
    (True, True, True)
    """
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
        return (
            f"{STALENESS_KEY} must be a positive integer, got {bound!r} (null: unbounded; verl's default is 8, "
            "1-2 keeps async near on-policy, 2: at most one update old)"
        )
    return None


STALE_SHARE = "off_policy/stale_share"
"""Share of a step's trajectories older than the trainer's weights (0 in sync)."""
DROPPED_STALE_GROUPS = "off_policy/dropped_stale_groups"
"""GRPO groups a step dropped as older than the staleness bound."""


def trajectory_staleness(step: int, versions: tuple[int, int]) -> int:
    """How many weight updates behind step ``step``'s trainer the oldest weights that generated a trajectory are:
    ``versions`` is (first, last) weight version its turns came from (verl's ``min/max_global_steps``). verl's
    ``trajectory_staleness_worst``; 0 for every trajectory of a sync step.

    >>> trajectory_staleness(3, (2, 2)), trajectory_staleness(3, (1, 2))
    (0, 1)
    """
    return step - 1 - versions[0]


def over_bound(step: int, versions: tuple[int, int], bound: int) -> bool:
    """Whether a trajectory is too old for step ``step`` under staleness bound ``bound``: verl's async buffer rule
    (versions spanned from dispatch, ``step - dispatch + 1``, above the bound), for a trajectory dispatched with the
    weights of its first version (dispatched at step ``versions[0] + 1``).

    >>> over_bound(2, (0, 0), 2), over_bound(2, (0, 0), 1), over_bound(3, (0, 0), 2)
    (False, True, True)
    """
    return trajectory_staleness(step, versions) + 1 > bound


def off_policy_metrics(
    step: int, versions: list[tuple[int, int]], num_dropped_groups: int
) -> dict[str, float]:
    """ragym's off-policy metrics of a step: the share of trajectories older than the trainer's weights, and the
    groups dropped as older than the staleness bound.

    >>> off_policy_metrics(3, [(2, 2), (1, 1)], 4)
    {'off_policy/stale_share': 0.5, 'off_policy/dropped_stale_groups': 4.0}
    """
    stale = [trajectory_staleness(step, v) for v in versions]
    return {
        STALE_SHARE: sum(s > 0 for s in stale) / max(len(stale), 1),
        DROPPED_STALE_GROUPS: float(num_dropped_groups),
    }


def staleness_metrics(step: int, versions: list[tuple[int, int]]) -> dict[str, float]:
    """verl's per-trajectory staleness metrics of a step (``training/off_policy/trajectory_{spans,staleness,
    staleness_worst}/{mean,max,min}``, as verl's v1 trainer computes them), for a trainer that is not verl's."""
    first, last = np.asarray(versions, dtype=float).reshape(-1, 2).T  # [N], [N]
    values = {
        "trajectory_spans": last - first + 1,
        "trajectory_staleness": (step - 1) - last,
        "trajectory_staleness_worst": (step - 1) - first,
    }
    return {
        f"training/off_policy/{name}/{stat}": float(getattr(v, stat)())
        for name, v in values.items()
        for stat in ("mean", "max", "min")
    }


RESUMED_TURN_SHARE = "off_policy/resumed_turn_share"
"""Share of a step's generated turns that a weight update split (aborted, then resumed on the new weights)."""
TURN_STALENESS = "off_policy/turn_staleness"
"""Per generated turn, updates behind the trainer's weights of the oldest weights that generated it (mean, max)."""


def turn_version_metrics(step: int, turn_versions: list[list[list[int]]]) -> dict[str, float]:
    """Per-turn staleness of a step's trajectories: ``turn_versions`` holds, per trajectory, each generated turn's
    (first, last) weight versions. A turn whose two versions differ was split by a weight update (partial rollout:
    aborted and resumed on the new weights); one finished on the weights it began with has one version.

    >>> turn_version_metrics(3, [[[1, 1], [1, 2]], [[2, 2]]])
    {'off_policy/resumed_turn_share': 0.3333333333333333, 'off_policy/turn_staleness/mean': 0.6666666666666666, 'off_policy/turn_staleness/max': 1.0}
    """
    turns = [turn for trajectory in turn_versions for turn in trajectory]
    if not turns:
        return {}
    stale = [step - 1 - first for first, _ in turns]
    return {
        RESUMED_TURN_SHARE: sum(first != last for first, last in turns) / len(turns),
        f"{TURN_STALENESS}/mean": sum(stale) / len(stale),
        f"{TURN_STALENESS}/max": float(max(stale)),
    }


CORRECTION_KEY = "ragym.off_policy_correction"
"""Recipe switch of the off-policy correction (truncated importance sampling between the rollout's and the trainer's
log-probs, ``ragym.rl.correction``): ``auto``, ``token``, ``sequence`` or ``off``."""
CORRECTION_SETTINGS = ("auto", "token", "sequence", "off")
"""What ``CORRECTION_KEY`` takes; ``auto`` (the default): ``token`` where the rollout's log-probs are expected to
differ from the trainer's (an async mode, a vLLM or SGLang rollout), ``off`` elsewhere."""
IS_THRESHOLD_KEY = "algorithm.rollout_correction.rollout_is_threshold"
"""verl's truncation bound of the importance ratio (2.0), read by both engines."""
VERL_LEVEL_KEY = "algorithm.rollout_correction.rollout_is"
"""verl's own aggregation level, which ragym sets from ``CORRECTION_KEY`` (a recipe leaves it null)."""
SEPARATE_ROLLOUTS = ("vllm", "sglang")
"""Rollout engines that compute log-probs with kernels of their own (so they differ from the trainer's)."""


def correction_level(setting: str, *, asynchronous: bool, rollout: str) -> str | None:
    """The importance-sampling level a run uses (None: no correction): ``setting`` as the recipe gives it, resolved
    for a run that is ``asynchronous`` (episodes one or more weight versions old) and rolls out with ``rollout``.

    >>> correction_level("auto", asynchronous=True, rollout="hf"), correction_level("auto", asynchronous=False, rollout="vllm")
    ('token', 'token')
    >>> correction_level("auto", asynchronous=False, rollout="hf"), correction_level("sequence", asynchronous=False, rollout="hf")
    (None, 'sequence')
    """
    if setting not in CORRECTION_SETTINGS:
        raise ValueError(f"{CORRECTION_KEY} must be one of {', '.join(CORRECTION_SETTINGS)}, got {setting!r}")
    if setting == "auto":
        return "token" if asynchronous or rollout in SEPARATE_ROLLOUTS else None
    return None if setting == "off" else setting


def correction_problems(config: Any) -> list[str]:
    """What in a composed recipe stops the correction from being set as one switch (empty: nothing): its value,
    verl's level set beside it (two names for one setting), a truncation bound that is not a number above 1."""
    problems = []
    setting = OmegaConf.select(config, CORRECTION_KEY, default="auto")
    if setting not in CORRECTION_SETTINGS:
        problems.append(f"{CORRECTION_KEY} must be one of {', '.join(CORRECTION_SETTINGS)}, got {setting!r}")
    if OmegaConf.select(config, VERL_LEVEL_KEY, default=None) is not None:
        problems.append(
            f"{VERL_LEVEL_KEY} is set by ragym from {CORRECTION_KEY} (token, sequence, off or auto); leave it null "
            "and set the correction there"
        )
    threshold = OmegaConf.select(config, IS_THRESHOLD_KEY, default=2.0)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or threshold <= 1:
        problems.append(
            f"{IS_THRESHOLD_KEY} must be a number above 1 (the truncation bound of the importance ratio), got "
            f"{threshold!r}"
        )
    return problems
