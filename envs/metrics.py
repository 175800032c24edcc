"""Episode metrics, computed from the episode's events alone: the registry, the metrics every env shares, means.

One definition serves training logs (``ragym.rl.engine``), ``ragym eval``, ``ragym rollout``, the demo and the
agent loop's ``extra_fields``. ``episode_metrics(env_id, events)`` returns the metrics every env shares
(turns, the action histogram, format errors, ...) plus the env's own, which its package's ``metrics`` module
registers with ``@register_metrics(env_id, action_kinds=...)`` (``ragym.envs.kbvqa.metrics``, ...). A value is
None where it does not apply (Ident. without gold entities); ``mean_metrics`` averages each metric over the
episodes where it applies. An episode the env ended by raising gets the env's ``failed`` metrics instead of its own:
its rates (Ident., R3G's Recall@k) count 0 there, as its answer does, so a crash never leaves the denominator. An
env that could not start (``unstarted``) names none of its row's golds: ``mean_metrics`` counts such an episode 0 in
each rate its ``failed`` metrics leave None, wherever another episode reports that rate, as ``eval_figures`` counts
its Ident.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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
    failed: MetricFn | None = None
    """The env's own metrics of an episode it ended by raising (an ``episode_error`` event): its rates 0 where
    the events say they apply (the task names its golds), None elsewhere (``mean_metrics`` counts an unstarted
    episode's None rates 0 where other episodes report them); none: its metrics do not apply."""


_REGISTRY: dict[str, EnvMetrics] = {}


def register_metrics(
    env_id: str, action_kinds: tuple[str, ...], failed: MetricFn | None = None
) -> Callable[[MetricFn], MetricFn]:
    """Register ``fn`` as ``env_id``'s episode metrics (``failed``: those of an episode the env ended by
    raising, ``EnvMetrics.failed``); a duplicate env id is an error."""

    def wrap(fn: MetricFn) -> MetricFn:
        if env_id in _REGISTRY:
            raise ValueError(f"episode metrics for {env_id!r} are already registered")
        _REGISTRY[env_id] = EnvMetrics(tuple(action_kinds), fn, failed)
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
        # The env raised: its own metrics need events the episode never reached; its rates count it as failed.
        failed = entry.failed(events) if entry.failed is not None else {}
        return {**shared_metrics(events, entry.action_kinds), **failed}
    return {**shared_metrics(events, entry.action_kinds), **entry.fn(events)}


def shared_metrics(events: list[Event], action_kinds: tuple[str, ...]) -> Metrics:
    """Turns, the action histogram, format errors, violations, truncation (any, by the policy's own tokens, by an
    observation that did not fit, by one whose images did: the image budget's share), whether the policy answered, and
    searches the retrieval service could not answer (``retrieval_errors``), whether the env raised and ended
    the episode (``errors``: an ``episode_error`` event), and whether it raised before the episode could start
    (``unstarted``: a ``reset`` one).

    ``turns`` counts every policy turn an event names, the one the agent loop cut included.

    >>> from ragym.envs import events as ev
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
    errors = events_of(events, "episode_error")
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
        "errors": float(bool(errors)),
        "unstarted": float(any(e["stage"] == "reset" for e in errors)),
    }
    metrics.update({f"actions/{kind}": float(kinds[kind]) for kind in action_kinds})
    return metrics


def mean_metrics(per_episode: list[Metrics]) -> Metrics:
    """The mean of each metric over the episodes where it applies (None where it applies to none).

    An episode whose env could not start (``unstarted``) counts 0 in each metric it holds as None (its env's
    ``failed`` rates, which no event of it can decide) wherever another episode reports that metric: the rule
    ``eval_figures`` applies to Ident.

    >>> unstarted = {"unstarted": 1.0, "ident_acc": None}
    >>> mean_metrics([{"unstarted": 0.0, "ident_acc": 1.0}, unstarted])["ident_acc"]
    0.5
    """
    keys = sorted({k for m in per_episode for k in m})
    means: Metrics = {}
    for key in keys:
        values = [value for m in per_episode if (value := m.get(key)) is not None]
        if values:
            values += [0.0 for m in per_episode if m.get("unstarted") and key in m and m[key] is None]
        means[key] = sum(values) / len(values) if values else None
    return means


def single_event(events: list[Event], kind: str, env_id: str) -> Event:
    """The episode's one event of ``kind``; none or several is an error naming ``env_id``'s metrics."""
    found = events_of(events, kind)
    if len(found) != 1:
        raise ValueError(f"{env_id} episode metrics need exactly one {kind!r} event, got {len(found)}")
    return found[0]


class Evaluated(Protocol):
    """What one episode of ``ragym eval`` contributes to ``eval_figures`` (``ragym.rl.eval.evaluate.EpisodeRecord``)."""

    correct: float
    ident: float | None
    gold_ranks: list[int | None]
    started: bool


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def eval_figures(records: Sequence[Evaluated]) -> dict[str, Any]:
    """Episodes, mean answer score, Ident. (where known) and the retriever's R@1 / R@pool over known golds:
    ``ragym eval``'s columns for every data source, and each column of an env's own tables.

    An episode whose env could not start names no golds: it counts as not identified wherever the other
    episodes report Ident., as its answer counts wrong, so neither figure leaves it out.
    """
    ranks = [rank for r in records for rank in r.gold_ranks]
    known = [r.ident for r in records if r.ident is not None]
    unstarted = [0.0 for r in records if not r.started] if known else []
    return {
        "num_episodes": len(records),
        "accuracy": _mean([r.correct for r in records]),
        "ident": _mean(known + unstarted),
        "retriever_r1": _mean([float(rank == 0) for rank in ranks]),
        "retriever_r_pool": _mean([float(rank is not None) for rank in ranks]),
    }
