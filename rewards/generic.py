"""The reward terms every env can use: ``outcome`` (the final answer) and ``format`` (every turn's grammar).

They read only the shared events (``ragym.envs.events``: ``answer``, ``action``, ``truncated``), never text hidden
in reasoning; a turn the env never saw is judged by the episode's env's own parser (``turn_parses``). MMAgent-R²'s
R_outcome and R_format (section 3.3.1, Eq. 2) are these terms; each env's own terms live in ``rewards/<env>.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragym.envs.events import events_of
from ragym.envs.hooks import env_hooks, hook
from ragym.rewards.answers import GENERIC_METRICS, score_answer
from ragym.rewards.episode import Episode
from ragym.rewards.evqa import load_equivalence
from ragym.rewards.registry import register_reward
from ragym.rewards.text import has_markup


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_optional_int(name: str, value: Any, minimum: int) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
        raise ValueError(f"{name} must be null or an int >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class OutcomeParams:
    """Recipe parameters of ``outcome``."""

    time_year_tolerance: int | None = None
    """InfoSeek/MMhops Time questions: null = official exact match; n = a year within n counts (paper: 1)."""
    generic_metric: str = "em"
    """``em`` (normalised exact match) or ``f1`` (token F1) for ``generic`` and ``synthetic_kbvqa``."""
    bem_model_path: str | None = None
    """E-VQA: local answer-equivalence model tried after exact match; null = exact match only."""
    markup_scores_zero: bool = True
    """An answer containing a tag (``</answer>``, ``<b>``...) scores 0: tag injection earns nothing."""
    no_number_as_zero: bool = False
    """InfoSeek/MMhops Numerical questions: read an answer without a number as 0, as the official scorers do
    (so "unknown" scores 1 where the gold range holds 0); ``ragym eval`` sets it. False (training) scores such an
    answer 0, so the reward never pays text without a number (a departure: docs/rewards.md)."""

    def __post_init__(self) -> None:
        _check_optional_int("time_year_tolerance", self.time_year_tolerance, 0)
        _check_choice("generic_metric", self.generic_metric, GENERIC_METRICS)
        if not isinstance(self.no_number_as_zero, bool):
            raise ValueError(f"no_number_as_zero must be true or false, got {self.no_number_as_zero!r}")


@register_reward("outcome", params=OutcomeParams)
def outcome(episode: Episode, **params: Any) -> float | None:
    """R_outcome: the benchmark metric of the episode's final answer, in [0, 1]; 0 when it never answered.

    >>> ep = Episode("synthetic_kbvqa", ["<reason>it is paris</reason><answer>Paris</answer>"],
    ...              [{"type": "answer", "turn": 0, "text": "Paris", "forced": False}], ["Paris"])
    >>> outcome(ep)
    1.0
    """
    cfg = OutcomeParams(**params)
    if episode.ground_truth is None:
        return None
    answers = events_of(episode.events, "answer")
    if not answers:
        return 0.0
    # The env ends the episode at its first answer; a misbehaving env cannot let a policy spray answers.
    final = answers[0]
    text = final.get("text")
    if not isinstance(text, str):
        return 0.0
    if cfg.markup_scores_zero and has_markup(text):
        return 0.0
    equivalence = load_equivalence(cfg.bem_model_path) if cfg.bem_model_path else None
    return score_answer(
        episode.data_source,
        text,
        episode.ground_truth,
        time_year_tolerance=cfg.time_year_tolerance,
        equivalence=equivalence,
        generic_metric=cfg.generic_metric,
        no_number_as_zero=cfg.no_number_as_zero,
    )


@dataclass(frozen=True)
class FormatParams:
    """Recipe parameters of ``format``."""

    mode: str = "binary"
    """``binary``: 1 only when every turn is well formed (the paper's strict reading); ``fraction``: the
    share of well-formed turns."""
    on_truncated: str = "score"
    """Episodes ended by the turn or length budget: ``score`` them like any other, give ``zero``, or
    ``skip`` the term (None)."""

    def __post_init__(self) -> None:
        _check_choice("mode", self.mode, ("binary", "fraction"))
        _check_choice("on_truncated", self.on_truncated, ("score", "zero", "skip"))


TurnCheck = Callable[[Episode, str], bool]
"""``check(episode, text)`` -> whether the episode's env would have accepted ``text`` as a well-formed turn."""

_TURN_CHECKS: dict[str, TurnCheck] = {}


def register_turn_check(env_name: str) -> Callable[[TurnCheck], TurnCheck]:
    """Decorator: judge unseen turns of the envs whose hooks are named ``env_name`` with ``check`` instead of their
    hooks' ``parse_action`` (for a grammar that depends on the episode's settings: KB-VQA without Reject)."""

    def decorator(check: TurnCheck) -> TurnCheck:
        if env_name in _TURN_CHECKS:
            raise ValueError(
                f"a turn check for {env_name!r} is already registered ({_TURN_CHECKS[env_name].__module__})"
            )
        _TURN_CHECKS[env_name] = check
        return check

    return decorator


def turn_parses(episode: Episode, text: str) -> bool:
    """Whether the episode's env would have accepted ``text``: its registered turn check, else its hooks'
    ``parse_action`` returning one of the action types its ``example_actions`` list."""
    if episode.env_id is None:
        raise ValueError(
            f"{episode.data_source}: format needs the episode's env_id to judge a turn the env never saw "
            "(verl's extra_info['env_id'], or the episode's env_id field)"
        )
    hooks = env_hooks(episode.env_id)
    check = _TURN_CHECKS.get(hooks.name)
    if check is not None:
        return check(episode, text)
    parse = hook(episode.env_id, "parse_action", "the format reward (a turn the env never saw)")
    if not hooks.example_actions:
        raise ValueError(
            f"{episode.env_id}: its hooks list no example_actions, so format cannot tell an action"
        )
    return type(parse(text)) in {type(action) for action in hooks.example_actions}


def _turn_flags(episode: Episode) -> list[bool]:
    """Whether each policy turn is well formed: the env's ``action`` events first, the env's parser otherwise."""
    flags: dict[int, bool] = {}
    for event in events_of(episode.events, "action"):
        turn = event["turn"]
        flags[turn] = flags.get(turn, True) and event.get("well_formed") is True
    # Turns the env never saw (a reply cut by the length budget) are judged by the episode's env's own parser.
    for t in range(len(episode.turns)):
        if t not in flags:
            flags[t] = turn_parses(episode, episode.turns[t])
    return [flags[t] for t in sorted(flags)]


def _is_truncated(episode: Episode) -> bool:
    return episode.truncated or bool(events_of(episode.events, "truncated"))


@register_reward("format", params=FormatParams)
def format_reward(episode: Episode, **params: Any) -> float | None:
    """R_format: every turn follows the action grammar (binary) or the share that does (fraction).

    >>> events = [{"type": "action", "turn": 0, "kind": "answer", "well_formed": True},
    ...           {"type": "action", "turn": 1, "kind": "invalid", "well_formed": False}]
    >>> ep = Episode("generic", ["t0", "t1"], events, "x")
    >>> format_reward(ep), format_reward(ep, mode="fraction")
    (0.0, 0.5)
    """
    cfg = FormatParams(**params)
    if _is_truncated(episode) and cfg.on_truncated != "score":
        return 0.0 if cfg.on_truncated == "zero" else None
    flags = _turn_flags(episode)
    if not flags:
        return None
    if cfg.mode == "binary":
        return float(all(flags))
    return sum(flags) / len(flags)
