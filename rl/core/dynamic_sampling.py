"""Dynamic sampling (DAPO) for multi-turn GRPO groups: drop groups whose rewards do not vary, refill, bounded.

A group whose G episodes all scored the same has zero advantage and teaches GRPO nothing. With
``algorithm.filter_groups.enable`` (verl's own keys, which verl's v1 sync trainer honours for ragym's groups
too) the local engine drops such groups and rolls out fresh rows in their place, up to
``max_num_gen_batches`` generation rounds per step; at the bound it tops the batch up with dropped groups
(they add no gradient) so every step trains on ``train_batch_size`` groups. ``metric`` names what must
vary: ``reward`` (the rubric total, as verl reads ``rm_scores``) or any ``compute_score`` key (``score``,
``reward/<term>``). Filtering off, the flat share is only counted (``grpo/zero_adv_group_share``).
Under verl's trainer (``trainer.v1.trainer_mode: ragym``) ragym's replay buffer applies the same keys to verl's
streaming refill, bounded at ``max_num_gen_batches`` x ``train_batch_size`` prompts per step
(``ragym.rl.verl_plugin.sampler``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ragym.rl.errors import UsageError

logger = logging.getLogger(__name__)

FILTER_SECTION = "algorithm.filter_groups"
"""verl's keys: ``enable``, ``metric``, ``max_num_gen_batches`` (``max_inflight_gen_batches`` is verl's only)."""
OUTCOME_KEY = "ragym.outcome_metric"
"""Recipe key: the reward term that measures the task's outcome, not its shaping."""
TOTAL_METRICS = ("reward", "score")
"""Filter metrics that read the rubric total (every weighted term, shaping included)."""


@dataclass(frozen=True)
class FilterConfig:
    """What the local engine reads of ``algorithm.filter_groups``."""

    enable: bool = False
    """Drop and refill flat groups (false: only count them)."""
    metric: str = "reward"
    """The per-episode value that must vary within a group: ``reward`` or a ``compute_score`` key."""
    max_num_gen_batches: int = 0
    """Generation rounds per step, the first included; 0 or less: no bound (a collapsed policy never ends)."""

    def __post_init__(self) -> None:
        if self.enable and not self.metric:
            raise UsageError(f"{FILTER_SECTION}.metric must be set when {FILTER_SECTION}.enable is true")


class Scored(Protocol):
    """An episode with a group id and ``compute_score``'s values (``ragym.rl.core.rollout.EpisodeResult``)."""

    uid: str
    score: dict[str, float]

    @property
    def reward(self) -> float: ...


def episode_value(episode: Scored, metric: str) -> float:
    """The value dynamic sampling compares within a group; a metric the rubric does not log is an error."""
    if metric == "reward":
        return episode.reward
    if metric not in episode.score:
        raise UsageError(
            f"{FILTER_SECTION}.metric={metric!r} is not among compute_score's keys {sorted(episode.score)}"
        )
    return float(episode.score[metric])


def split_groups(episodes: Sequence[Scored], metric: str) -> tuple[list[list[Scored]], list[list[Scored]]]:
    """The groups (episodes sharing a uid, in order) whose ``metric`` varies, and those where it does not.

    >>> from types import SimpleNamespace as E
    >>> eps = [E(uid=u, reward=r, score={}) for u, r in [("a", 1), ("a", 0), ("b", 1), ("b", 1)]]
    >>> [[e.uid for e in g] for g in split_groups(eps, "reward")[1]]
    [['b', 'b']]
    """
    groups: dict[str, list[Scored]] = {}
    for episode in episodes:
        groups.setdefault(episode.uid, []).append(episode)
    kept, flat = [], []
    for group in groups.values():
        values = [episode_value(e, metric) for e in group]
        # A single-episode group is kept, as verl's filter keeps it: it has no spread to measure. Its advantage is not
        # zero (verl's GRPO takes its raw reward), which is why a group estimator needs rollout.n >= 2 (recipe check).
        (flat if len(values) > 1 and float(np.ptp(values)) == 0.0 else kept).append(group)
    return kept, flat


@dataclass
class SampledBatch:
    """The groups one step trains on, the rows they came from, and how many rounds and drops it took."""

    groups: list[list[Any]]
    rows: list[Any]
    """One row per group, in the same order."""
    num_rounds: int = 1
    num_generated: int = 0
    num_flat: int = 0
    num_topped_up: int = 0
    """Flat groups trained on because the round bound was reached."""
    filtered: bool = True
    """Flat groups were dropped (``filter_groups.enable``); otherwise only counted, and every group trained on."""

    def metrics(self) -> dict[str, float]:
        """``dynamic_sampling/*``: the flat share of every generated group, rounds, drops and top-ups."""
        dropped = self.num_flat - self.num_topped_up if self.filtered else 0
        return {
            "dynamic_sampling/flat_group_share": self.num_flat / max(self.num_generated, 1),
            "dynamic_sampling/gen_batches": float(self.num_rounds),
            "dynamic_sampling/dropped_groups": float(dropped),
            "dynamic_sampling/topped_up_groups": float(self.num_topped_up),
        }


RolloutFn = Callable[[int, int], tuple[list[Any], Sequence[Scored]]]
"""``(num_rows, round) -> (rows, episodes)``: roll out ``num_rows`` fresh rows, G episodes each, grouped."""


def sample_groups(rollout: RolloutFn, num_groups: int, cfg: FilterConfig) -> SampledBatch:
    """Roll out until ``num_groups`` groups vary (or the round bound is hit); surplus groups are discarded."""
    kept: list[tuple[Any, list[Scored]]] = []
    flat: list[tuple[Any, list[Scored]]] = []
    out = SampledBatch(groups=[], rows=[], num_rounds=0)
    while len(kept) < num_groups:
        if cfg.max_num_gen_batches > 0 and out.num_rounds >= cfg.max_num_gen_batches:
            break
        rows, episodes = rollout(num_groups - len(kept), out.num_rounds)
        out.num_rounds += 1
        by_uid = {}
        for row, group in zip(rows, _grouped(episodes), strict=True):
            by_uid[group[0].uid] = row
        good, bad = split_groups(episodes, cfg.metric)
        kept += [(by_uid[g[0].uid], g) for g in good]
        flat += [(by_uid[g[0].uid], g) for g in bad]
        out.num_generated += len(good) + len(bad)
        out.num_flat += len(bad)
        if not cfg.enable:  # only counted: the step trains on every group, in rollout order
            out.rows, out.groups, out.filtered = list(rows), _grouped(episodes), False
            return out
    chosen = kept[:num_groups]
    if len(chosen) < num_groups:  # the bound: train on flat groups (zero advantage) rather than a short batch
        out.num_topped_up = num_groups - len(chosen)
        chosen += flat[: out.num_topped_up]
        logger.warning(
            "dynamic sampling: %d of %d groups still flat after %d generation rounds (%s.max_num_gen_batches); "
            "training on them",
            out.num_topped_up,
            num_groups,
            out.num_rounds,
            FILTER_SECTION,
        )
    out.rows = [row for row, _ in chosen]
    out.groups = [group for _, group in chosen]
    return out


def _grouped(episodes: Sequence[Scored]) -> list[list[Scored]]:
    """Consecutive episodes sharing a uid, as groups (the rollout keeps a row's G episodes together)."""
    groups: list[list[Scored]] = []
    for episode in episodes:
        if groups and groups[-1][0].uid == episode.uid:
            groups[-1].append(episode)
        else:
            groups.append([episode])
    return groups


def reward_weights(reward_kwargs: Mapping[str, Any]) -> dict[str, float]:
    """Term name -> weight of the rubric ``reward.custom_reward_function.reward_kwargs`` names."""
    from ragym.rewards.verl import rubric_for

    rubric = rubric_for(
        reward_kwargs.get("recipe"), reward_kwargs.get("recipe_path"), reward_kwargs.get("overrides")
    )
    return {term.name: term.weight for term in rubric.terms}


def shaped_metric_warning(metric: str, outcome: str | None, reward_terms: Mapping[str, float]) -> str | None:
    """A warning when the filter keys on a shaped reward rather than the outcome term (None: it does not).

    >>> shaped_metric_warning("reward/outcome", "reward/outcome", {"outcome": 1.0, "format": 1.0}) is None
    True
    """
    shaping = sorted(t for t, w in reward_terms.items() if w != 0 and f"reward/{t}" != outcome)
    if metric in TOTAL_METRICS and not shaping:
        return None
    if metric == outcome:
        return None
    what = f"the rubric total ({' + '.join(sorted(t for t, w in reward_terms.items() if w != 0))})"
    if metric not in TOTAL_METRICS:
        what = f"{metric}, a shaped term"
    target = f"set {FILTER_SECTION}.metric={outcome}" if outcome else f"set {OUTCOME_KEY}"
    return (
        f"{FILTER_SECTION}.metric={metric!r} keys on {what}, not the outcome: groups whose outcome is flat "
        f"but whose shaping varies are kept as signal; to filter on the outcome {target}"
    )
