"""Collapse guards: named checks on the per-step metric stream that warn, or stop a run that is going bad.

Both engines feed one ``GuardMonitor`` the dict of metrics they log each step (the local engine's names:
``reward/<term>``, ``episode/<metric>``, ``actor/entropy``, ``response_length/clip_ratio``; ragym's verl
trainer mode logs the same). Each guard watches one collapse the issue trackers of search-agent training
are full of: tool use abandoned, every batch rejected (or accepted), a format reward gamed while the outcome
stays flat, entropy collapse, responses cut at the length budget; those are off unless a recipe turns them on.
The run checks (``RUN_CHECKS``) catch a run that is broken without looking it: the rollout serving other weights
than the trainer's (log-prob mismatch for N steps), LoRA adapters that a sync did not deliver, images that never
reached the model, every group flat for N steps; they are on (``stop``) by default, with bounds no healthy run
reaches. A guard's thresholds and its action (``off``, ``warn`` or ``stop``) are recipe fields under
``ragym.guards.<name>``. A firing is logged as
``guard/<name>`` = 1 in that step's metrics and appended to ``<run>/guards.jsonl``, which ``ragym view``
shows; ``stop`` ends the run with one line naming the guard, the step and the numbers.

A guard whose metrics are all held-out ones (``val/<metric>``: the periodic evaluation both engines log,
``trainer.test_freq``) is a validation guard: it is checked only at steps that have an evaluation result and
counts evaluations, not steps (``val_ident_floor``, ``val_reject_all``, or any guard pointed at ``val/`` keys).
The evaluation before training (``trainer.val_before_train``) is the untrained baseline and is not checked.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ragym.envs.files import read_log
from ragym.rl.errors import UsageError

logger = logging.getLogger(__name__)

ACTIONS = ("off", "warn", "stop")
"""What a guard does when it fires."""
GUARDS_SECTION = "ragym.guards"
"""Recipe section: one mapping per guard name."""
GUARDS_FILE = "guards.jsonl"
"""Every firing of a run, one JSON line each, in the run's output folder."""
MISMATCH_BOUND = 0.01
"""``rollout_mismatch``'s default bound on ``off_policy/mismatch_kl`` (nats per generated token)."""
MISMATCH_STEPS = 3
"""``rollout_mismatch``'s default N."""
FLAT_STEPS = 10
"""``flat_groups``'s default N."""
ADAPTERS_TRAINED_CHANGED = "lora/sync_trained_changed"
"""1.0 at a weight sync when the trainer's adapters changed since the previous sync, else 0.0."""
ADAPTERS_ROLLOUT_CHANGED = "lora/sync_rollout_changed"
"""1.0 at a weight sync when the rollout's adapters after it differ from before it, else 0.0."""
VAL_PREFIX = "val/"
"""Held-out evaluation metrics (``val/`` + the training names); a guard reading them counts evaluations."""


@dataclass(frozen=True)
class NoSearchGuard:
    """Fires when no episode searched at any of the first ``steps`` steps: the policy abandoned its tool."""

    action: str = "off"
    """off, warn or stop."""
    metric: str = "episode/searches"
    """Searches per episode (batch mean); DocMemo, MEMORA and R3G name their own search action's count."""
    steps: int = 5
    """K: the steps observed before the guard decides."""


@dataclass(frozen=True)
class DecisionShareGuard:
    """Fires when one decision kind makes up at least ``min_share`` of all decisions for ``steps`` steps."""

    action: str = "off"
    """off, warn or stop."""
    metric: str = "episode/actions/reject"
    """Decisions of the watched kind per episode (batch mean)."""
    other_metric: str = "episode/actions/rerank"
    """Decisions of the opposite kind per episode (batch mean)."""
    min_share: float = 1.0
    """Share of the watched kind among both at or above which a step counts (1.0: every decision)."""
    steps: int = 10
    """N: consecutive steps (evaluations, for ``val/`` metrics) before the guard fires."""


@dataclass(frozen=True)
class FormatOnlyGuard:
    """Fires when, over ``window`` steps, the format term rose by ``min_rise`` while the outcome did not."""

    action: str = "off"
    """off, warn or stop."""
    format_metric: str = "reward/format"
    """The format term (batch mean)."""
    outcome_metric: str = "reward/outcome"
    """The outcome term (batch mean)."""
    window: int = 10
    """Steps compared: the mean of the later half minus the mean of the earlier half."""
    min_rise: float = 0.2
    """Rise of the format term at or above which it counts as rising."""
    max_outcome_rise: float = 0.02
    """Rise of the outcome term below which it counts as flat."""


@dataclass(frozen=True)
class ThresholdGuard:
    """Fires when ``metric`` is beyond ``threshold`` (below it, or above with ``above``) for ``steps`` steps."""

    action: str = "off"
    """off, warn or stop."""
    metric: str = "actor/entropy"
    """The watched metric."""
    threshold: float = 0.05
    """The floor (or, with ``above``, the ceiling)."""
    above: bool = False
    """Fire on values at or above ``threshold`` instead of below it."""
    steps: int = 3
    """N: consecutive steps (evaluations, for a ``val/`` metric) before the guard fires."""


@dataclass(frozen=True)
class ImagesDroppedGuard:
    """Fires when a step's episodes carried images but its batch held no image token, for ``steps`` steps: the
    images were dropped on the way to the model (a processor without its image part, a template without
    placeholders), and the policy trains blind."""

    action: str = "stop"
    """off, warn or stop."""
    images_metric: str = "images/per_episode"
    """Images an episode carried (its prompt's and its observations'), batch mean."""
    tokens_metric: str = "images/tokens_per_episode"
    """Image placeholder tokens in an episode's ids, batch mean."""
    steps: int = 1
    """N: consecutive steps before the check fires."""


@dataclass(frozen=True)
class AdapterSyncGuard:
    """Fires at a weight sync after which the rollout's LoRA adapters are what they were before it, though the
    trainer's changed since the last sync: the rollout keeps sampling from adapters it never received (verl#7495).
    A step without a sync (or without LoRA) logs neither metric and is not judged."""

    action: str = "stop"
    """off, warn or stop."""
    trained_metric: str = ADAPTERS_TRAINED_CHANGED
    """1 when the trainer's adapters differ from those of the previous sync (``adapter_sync_metrics``)."""
    rollout_metric: str = ADAPTERS_ROLLOUT_CHANGED
    """1 when the rollout's adapters after this sync differ from its adapters before it."""


GUARD_TYPES: dict[str, type] = {
    "no_search": NoSearchGuard,
    "reject_all": DecisionShareGuard,
    "accept_all": DecisionShareGuard,
    "format_only": FormatOnlyGuard,
    "entropy_floor": ThresholdGuard,
    "length_limit": ThresholdGuard,
    "val_ident_floor": ThresholdGuard,
    "val_reject_all": DecisionShareGuard,
    "rollout_mismatch": ThresholdGuard,
    "adapter_sync": AdapterSyncGuard,
    "images_dropped": ImagesDroppedGuard,
    "flat_groups": ThresholdGuard,
}
"""Every guard name and its config type (the recipe keys under ``ragym.guards.<name>``)."""
RUN_CHECKS = ("rollout_mismatch", "adapter_sync", "images_dropped", "flat_groups")
"""Guards that catch a run broken silently rather than a policy collapsing: on (``stop``) unless the recipe says
otherwise, with bounds no healthy run reaches (docs/training.md, "Run checks")."""
DEFAULTS: dict[str, Any] = {
    "no_search": NoSearchGuard(),
    "reject_all": DecisionShareGuard(),
    "accept_all": DecisionShareGuard(metric="episode/actions/rerank", other_metric="episode/actions/reject"),
    "format_only": FormatOnlyGuard(),
    "entropy_floor": ThresholdGuard(),
    "length_limit": ThresholdGuard(metric="response_length/clip_ratio", threshold=0.5, above=True),
    "val_ident_floor": ThresholdGuard(metric="val/episode/ident_acc", threshold=0.05, steps=2),
    "val_reject_all": DecisionShareGuard(
        metric="val/episode/actions/reject", other_metric="val/episode/actions/rerank", steps=2
    ),
    # Rollout and trainer disagree on the sampled tokens' log-probs for N steps in a row: the rollout serves other
    # weights than the trainer's (an adapter or weight sync that does not arrive), not one step's staleness.
    "rollout_mismatch": ThresholdGuard(
        action="stop",
        metric="off_policy/mismatch_kl",
        threshold=MISMATCH_BOUND,
        above=True,
        steps=MISMATCH_STEPS,
    ),
    "adapter_sync": AdapterSyncGuard(),
    "images_dropped": ImagesDroppedGuard(),
    # Every GRPO group scored flat: no advantage, no gradient, step after step.
    "flat_groups": ThresholdGuard(
        action="stop", metric="grpo/zero_adv_group_share", threshold=1.0, above=True, steps=FLAT_STEPS
    ),
}
"""Each guard's config when the recipe leaves it (or a field of it) out: the collapse guards off, the run checks
(``RUN_CHECKS``) on."""


@dataclass(frozen=True)
class Firing:
    """One guard firing at one step."""

    guard: str
    step: int
    action: str
    detail: str
    """The numbers that made it fire."""

    def line(self) -> str:
        """The one line a user reads: which guard, which step, the numbers."""
        return f"guard {self.guard} fired at step {self.step}: {self.detail} (action: {self.action})"


class GuardStop(UsageError):
    """A guard with ``action: stop`` fired; the message is its one line."""


def guard_metric_fields(guard: Any) -> list[str]:
    """The names of ``guard``'s fields that name a metric it reads (``*metric``)."""
    return [f.name for f in fields(guard) if f.name.endswith("metric")]


def guard_metrics(guard: Any) -> list[str]:
    """The metric keys ``guard`` reads."""
    return [getattr(guard, name) for name in guard_metric_fields(guard)]


def reads_validation(guard: Any) -> bool:
    """Whether ``guard`` watches held-out evaluations (every metric it reads is a ``val/`` one)."""
    return all(key.startswith(VAL_PREFIX) for key in guard_metrics(guard))


def read_guards(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """Guard configs from the recipe's ``ragym.guards`` mapping; an unknown name, field or action is an error."""
    section = dict(section or {})
    unknown = sorted(set(section) - set(GUARD_TYPES))
    if unknown:
        raise UsageError(f"{GUARDS_SECTION}: unknown guards {unknown}; known: {sorted(GUARD_TYPES)}")
    out = {}
    for name, default in DEFAULTS.items():
        given = dict(section.get(name) or {})
        names = {f.name for f in fields(default)}
        if set(given) - names:
            raise UsageError(f"{GUARDS_SECTION}.{name}: unknown keys {sorted(set(given) - names)}")
        config = type(default)(**{**asdict(default), **given})
        if config.action not in ACTIONS:
            raise UsageError(
                f"{GUARDS_SECTION}.{name}.action must be one of {ACTIONS}, got {config.action!r}"
            )
        held_out = [key.startswith(VAL_PREFIX) for key in guard_metrics(config)]
        if any(held_out) and not all(held_out):
            # Evaluations and training steps come at different rates: one streak cannot count both.
            raise UsageError(
                f"{GUARDS_SECTION}.{name}: its metrics {guard_metrics(config)} mix held-out ({VAL_PREFIX}) and "
                "training ones; a guard reads one or the other"
            )
        out[name] = config
    return out


@dataclass
class _State:
    """What one guard remembers between steps."""

    streak: int = 0
    seen: int = 0
    searched: bool = False
    fired: bool = False
    history: deque = field(default_factory=deque)
    missing_warned: bool = False
    unit: str = "steps"
    """What the guard counts: training steps, or evaluations for a validation guard."""


class GuardMonitor:
    """Runs every guard that is not off on each step's metrics; records and returns the firings.

    A step's metrics may hold training metrics, an evaluation's ``val/`` metrics, or both (verl logs them in
    one dict, the local engine in two records of the same step): a training guard is checked when training
    metrics are there, a validation guard when ``val/`` ones are.
    """

    def __init__(self, guards: Mapping[str, Any], out_dir: str | Path | None = None) -> None:
        self.guards = {name: g for name, g in guards.items() if g.action != "off"}
        self.on_validation = {name: reads_validation(g) for name, g in self.guards.items()}
        self.state = {
            name: _State(unit="evaluations" if self.on_validation[name] else "steps") for name in self.guards
        }
        self.path = Path(out_dir) / GUARDS_FILE if out_dir is not None else None
        self.checked: list[str] = []
        """The guards the last ``update`` checked."""

    def update(self, step: int, metrics: Mapping[str, Any]) -> list[Firing]:
        """Check ``metrics`` of ``step`` with every guard that is on and has its kind of metrics there; log and
        record the firings, return them."""
        held_out = any(key.startswith(VAL_PREFIX) for key in metrics)
        training = any(not key.startswith(VAL_PREFIX) for key in metrics)
        self.checked = [n for n in self.guards if (held_out if self.on_validation[n] else training)]
        firings = []
        for name in self.checked:
            guard = self.guards[name]
            detail = _CHECKS[type(guard)](name, guard, self.state[name], metrics)
            if detail is not None:
                firings.append(Firing(name, step, guard.action, detail))
        for firing in firings:
            log = logger.error if firing.action == "stop" else logger.warning
            log("%s", firing.line())
            if self.path is not None:
                with self.path.open("a") as f:
                    f.write(json.dumps({**asdict(firing), "message": firing.line()}) + "\n")
        return firings

    def step_metrics(self, firings: list[Firing]) -> dict[str, float]:
        """``guard/<name>``: 1.0 for each guard that fired this step, 0.0 for the others the last update checked."""
        fired = {f.guard for f in firings}
        return {f"guard/{name}": float(name in fired) for name in self.checked}

    def check(self, step: int, metrics: dict[str, Any]) -> Firing | None:
        """``update`` plus the ``guard/<name>`` metrics added to ``metrics``; the first stop firing, if any."""
        firings = self.update(step, metrics)
        metrics.update(self.step_metrics(firings))
        return next((f for f in firings if f.action == "stop"), None)


def _value(name: str, key: str, state: _State, metrics: Mapping[str, Any]) -> float | None:
    """``metrics[key]`` as a float; a missing one is logged once per guard (the guard cannot judge)."""
    if key in metrics and metrics[key] is not None:
        return float(metrics[key])
    if not state.missing_warned:
        logger.warning("guard %s: this run logs no %r (yet); the guard waits for it", name, key)
        state.missing_warned = True
    return None


def _push(state: _State, value: Any, size: int) -> list[Any]:
    """Append ``value`` to the guard's history, keep the last ``size``; the history as a list."""
    state.history.append(value)
    while len(state.history) > size:
        state.history.popleft()
    return list(state.history)


def _streak(state: _State, holds: bool, steps: int) -> bool:
    """Count consecutive steps where the condition holds; True once when the streak reaches ``steps``."""
    state.streak = state.streak + 1 if holds else 0
    if not holds:
        state.fired = False  # re-arm: a later streak fires again
    if state.streak >= steps and not state.fired:
        state.fired = True
        return True
    return False


def _no_search(name: str, g: NoSearchGuard, state: _State, metrics: Mapping[str, Any]) -> str | None:
    value = _value(name, g.metric, state, metrics)
    if value is None or state.seen >= g.steps:
        return None
    state.seen += 1
    state.searched = state.searched or value > 0
    if state.seen == g.steps and not state.searched:
        return f"{g.metric} = 0 at each of the first {g.steps} {state.unit}"
    return None


def _decision_share(
    name: str, g: DecisionShareGuard, state: _State, metrics: Mapping[str, Any]
) -> str | None:
    mine, other = _value(name, g.metric, state, metrics), _value(name, g.other_metric, state, metrics)
    if mine is None or other is None:
        return None
    share = mine / (mine + other) if mine + other > 0 else None
    history = _push(state, share, g.steps)
    if _streak(state, share is not None and share >= g.min_share, g.steps):
        shares = ", ".join(f"{s:.2f}" for s in history)
        return f"{g.metric} share of decisions >= {g.min_share} for {g.steps} {state.unit} ({shares})"
    return None


def _format_only(name: str, g: FormatOnlyGuard, state: _State, metrics: Mapping[str, Any]) -> str | None:
    fmt, outcome = (
        _value(name, g.format_metric, state, metrics),
        _value(name, g.outcome_metric, state, metrics),
    )
    if fmt is None or outcome is None:
        return None
    history = _push(state, (fmt, outcome), g.window)
    if len(history) < g.window:
        return None
    half = g.window // 2
    early, late = history[:half], history[-half:]
    rise = [sum(v[i] for v in late) / half - sum(v[i] for v in early) / half for i in (0, 1)]
    if _streak(state, rise[0] >= g.min_rise and rise[1] < g.max_outcome_rise, 1):
        return (
            f"over {g.window} {state.unit} {g.format_metric} rose {rise[0]:+.3f} (>= {g.min_rise}) while "
            f"{g.outcome_metric} moved {rise[1]:+.3f} (< {g.max_outcome_rise})"
        )
    return None


def _threshold(name: str, g: ThresholdGuard, state: _State, metrics: Mapping[str, Any]) -> str | None:
    value = _value(name, g.metric, state, metrics)
    if value is None:
        return None
    history = _push(state, value, g.steps)
    holds = value >= g.threshold if g.above else value < g.threshold
    if _streak(state, holds, g.steps):
        values = ", ".join(f"{v:.3f}" for v in history)
        side = ">=" if g.above else "<"
        return f"{g.metric} {side} {g.threshold} for {g.steps} {state.unit} ({values})"
    return None


def _images_dropped(
    name: str, g: ImagesDroppedGuard, state: _State, metrics: Mapping[str, Any]
) -> str | None:
    images, tokens = (
        _value(name, g.images_metric, state, metrics),
        _value(name, g.tokens_metric, state, metrics),
    )
    if images is None or tokens is None:
        return None
    if _streak(state, images > 0 and tokens == 0, g.steps):
        return (
            f"{g.images_metric} = {images:.2f} but {g.tokens_metric} = 0 for {g.steps} {state.unit}: the "
            "episodes' images never reached the model"
        )
    return None


def _adapter_sync(name: str, g: AdapterSyncGuard, state: _State, metrics: Mapping[str, Any]) -> str | None:
    if g.trained_metric not in metrics or g.rollout_metric not in metrics:
        return None  # no sync at this step
    if _streak(state, metrics[g.trained_metric] > 0 and metrics[g.rollout_metric] == 0, 1):
        return (
            f"the trainer's adapters changed since the last sync ({g.trained_metric} = 1) but the rollout's "
            f"did not ({g.rollout_metric} = 0): the rollout samples from adapters it never received"
        )
    return None


_CHECKS = {
    NoSearchGuard: _no_search,
    ImagesDroppedGuard: _images_dropped,
    AdapterSyncGuard: _adapter_sync,
    DecisionShareGuard: _decision_share,
    FormatOnlyGuard: _format_only,
    ThresholdGuard: _threshold,
}


def read_firings(run_dir: str | Path) -> list[dict[str, Any]]:
    """The firings recorded in ``run_dir/guards.jsonl`` (none when the file is absent; a last line a killed run cut
    short is left out with a warning, as ``read_log`` says)."""
    path = Path(run_dir) / GUARDS_FILE
    if not path.is_file():
        return []
    return read_log(path)


def adapter_digest(tensors: Mapping[str, Any]) -> str:
    """A fingerprint of LoRA adapter tensors (name -> tensor): equal digests, equal adapters.

    >>> import torch
    >>> adapter_digest({"a": torch.zeros(2)}) == adapter_digest({"a": torch.zeros(2)}) != adapter_digest({"a": torch.ones(2)})
    True
    """
    digest = hashlib.sha256()
    for key in sorted(tensors):
        digest.update(key.encode())
        digest.update(tensors[key].detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def adapter_sync_metrics(trained: tuple[str, str], rollout: tuple[str, str]) -> dict[str, float]:
    """The metrics ``adapter_sync`` reads at a weight sync, from adapter digests (``adapter_digest``): ``trained``,
    the trainer's at the previous sync and at this one; ``rollout``, the rollout's before and after this one.

    >>> adapter_sync_metrics(("a", "b"), ("a", "a"))
    {'lora/sync_trained_changed': 1.0, 'lora/sync_rollout_changed': 0.0}
    """
    return {
        ADAPTERS_TRAINED_CHANGED: float(trained[0] != trained[1]),
        ADAPTERS_ROLLOUT_CHANGED: float(rollout[0] != rollout[1]),
    }
