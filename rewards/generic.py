"""The MMAgent-R² composite reward terms (section 3.3.1, Eq. 2-4) as registered reward functions.

``outcome`` scores the final answer, ``format`` the action grammar of every turn, ``verification`` each
Rerank/Reject decision (Eq. 3-4), and ``retrieval_recall`` whether a served batch held the gold entity.
All of them read ``episode.events`` (vocabulary in ``ragym.envs.kbvqa.events``) and never text hidden in reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragym.envs.events import events_of
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
    score_forced_answer: bool = True
    """Score the answer the env forced at the turn limit (Algorithm S1, line 26); false scores it 0."""
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
    if not isinstance(text, str) or (final.get("forced") and not cfg.score_forced_answer):
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


def _turn_flags(episode: Episode) -> list[bool]:
    """Whether each policy turn is well formed: the env's ``action`` events first, the parser otherwise."""
    flags: dict[int, bool] = {}
    for event in events_of(episode.events, "action"):
        turn = event["turn"]
        flags[turn] = flags.get(turn, True) and event.get("well_formed") is True
    missing = [t for t in range(len(episode.turns)) if t not in flags]
    if missing:
        # Turns the env never saw (a reply cut by the length budget) are judged by the env's own parser,
        # with the action set the episode ran with (no Reject under allow_reject=False).
        from ragym.envs.kbvqa.actions import ParseError, parse_action

        allow_reject = all(task.get("allow_reject", True) for task in events_of(episode.events, "task"))
        for t in missing:
            parsed = parse_action(episode.turns[t], allow_reject=allow_reject)
            flags[t] = not isinstance(parsed, ParseError)
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
