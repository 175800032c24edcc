"""ragym's per-step metrics from what verl keeps of each trajectory: the same keys the local engine logs.

verl 0.9.1 keeps, per trajectory, the agent loop's ``extra_fields`` with the reward function's result merged in
as ``extra_fields["reward_extra_info"]`` (``ragym.rewards.verl.compute_score``: ``score`` and ``reward/<term>``) and
the agent loop's ``episode_metrics`` (``ragym.envs.metrics``). Neither of verl's trainers turns those into training
metrics (only validation reads ``reward_extra_info``), so a trainer step that wants them calls ``step_metrics``
on the step's trajectories: ``reward/total``, ``reward/<term>``, ``episode/<metric>`` (``episode/errors``
included) and ``grpo/zero_adv_group_share``, exactly as ``ragym.rl.core.metrics.summarize`` computes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragym.rl.core.metrics import summarize


def step_metrics(extra_fields: Sequence[Mapping[str, Any]], group_ids: Sequence[str]) -> dict[str, float]:
    """Batch means of the rubric total, its terms and the episode metrics of one step's trajectories.

    ``group_ids``: each trajectory's GRPO group (verl's ``uid``), for the share of groups with one reward.
    """
    if len(extra_fields) != len(group_ids) or not extra_fields:
        raise ValueError(f"{len(extra_fields)} trajectories but {len(group_ids)} group ids")
    rewards, breakdowns, stats = [], [], []
    for fields in extra_fields:
        scored = fields.get("reward_extra_info")
        if not isinstance(scored, Mapping) or "score" not in scored:
            raise ValueError(
                "a trajectory has no reward_extra_info with a score: is the reward ragym.rewards.verl.compute_score?"
            )
        rewards.append(float(scored["score"]))
        breakdowns.append({k: float(v) for k, v in scored.items() if k.startswith("reward/")})
        stats.append(dict(fields["episode_metrics"]))
    return summarize(rewards, breakdowns, stats, list(group_ids))


def tq_column(data: Any, key: str) -> list[Any]:
    """A non-tensor field of a batch read back from TransferQueue, as a list with one item per trajectory
    (taken out of ``data``: indexing a non-tensor field returns tensordict's own list type)."""
    value = data.pop(key)
    return value.tolist() if hasattr(value, "tolist") else list(value)
