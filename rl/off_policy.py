"""Staleness of trajectories under asynchronous rollouts, counted alike by verl's trainer modes and the local engine.

Weight version v is the policy after training step v (version 0: the initial weights); the trainer of step ``s``
(1-based, verl's ``global_steps``) holds version ``s - 1``. A trajectory records the first and last version its
turns came from. The staleness bound is verl's ``trainer.v1.sampler.max_off_policy_threshold`` (``THRESHOLD_KEY``):
the most versions a trajectory may span from its prompt's dispatch to the step that trains on it, so a trajectory a
step trains on is at most ``bound - 1`` updates old; an older one is dropped and counted, never trained on.
"""

from __future__ import annotations

import numpy as np

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
    values = {"trajectory_spans": last - first + 1, "trajectory_staleness": (step - 1) - last,
              "trajectory_staleness_worst": (step - 1) - first}  # fmt: skip
    return {f"training/off_policy/{name}/{stat}": float(getattr(v, stat)())
            for name, v in values.items() for stat in ("mean", "max", "min")}  # fmt: skip
