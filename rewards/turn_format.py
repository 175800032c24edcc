"""The per-turn format score shared by envs whose rewards judge every turn (DocMemo, MEMORA).

A turn is good when the env accepted it as well formed (its ``action`` event) and, with
``count_violations``, the protocol did not reject it; a turn the env never saw (a reply cut by the
length budget) is judged by the env's own parser.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragym.envs.events import events_of
from ragym.rewards.episode import Episode


@dataclass(frozen=True)
class TurnFormatParams:
    """Recipe parameters of a per-turn format reward (``docmemo_format``, ``memora_format``)."""

    mode: str = "binary"
    """``binary``: 1 only when every turn is accepted; ``fraction``: the share of accepted turns."""
    count_violations: bool = True
    """Well-formed turns the protocol rejected (wrong phase, budget spent...) count as bad turns too."""
    max_turn_chars: int = 8192
    """Parser limit for turns the env never saw (a reply cut by the length budget)."""

    def __post_init__(self) -> None:
        if self.mode not in ("binary", "fraction"):
            raise ValueError(f"mode must be 'binary' or 'fraction', got {self.mode!r}")


def turn_format_score(
    episode: Episode, cfg: TurnFormatParams, parses: Callable[[str, int], bool]
) -> float | None:
    """The episode's format score under ``cfg``; ``parses(text, max_chars)`` is the env's grammar check.

    >>> ev = [{"type": "action", "turn": 0, "kind": "stop", "well_formed": True}]
    >>> turn_format_score(Episode("x", ["a", "b"], ev, {}), TurnFormatParams(mode="fraction"), lambda t, n: False)
    0.5
    """
    good: dict[int, bool] = {e["turn"]: bool(e["well_formed"]) for e in events_of(episode.events, "action")}
    if cfg.count_violations:
        for e in events_of(episode.events, "protocol_violation"):
            good[e["turn"]] = False
    for turn, text in enumerate(episode.turns):
        if turn not in good:
            good[turn] = parses(text, cfg.max_turn_chars)
    if not good:
        return None
    flags = list(good.values())
    return float(all(flags)) if cfg.mode == "binary" else sum(flags) / len(flags)


def parses_with(parse_action: Callable[[str, int], Any], error_type: type) -> Callable[[str, int], bool]:
    """A grammar check from an env's ``parse_action`` and its ``ParseError`` type."""
    return lambda text, max_chars: not isinstance(parse_action(text, max_chars), error_type)
