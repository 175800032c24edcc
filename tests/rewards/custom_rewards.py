"""Custom reward functions that tests plug into recipes by dotted path (``tests.rewards.custom_rewards:...``)."""

from __future__ import annotations

from ragym.rewards import Episode


def brevity(episode: Episode, *, max_turns: int = 8) -> float:
    """1 for a one-turn episode, falling linearly to 0 at ``max_turns`` turns."""
    return max(0.0, 1.0 - (len(episode.turns) - 1) / (max_turns - 1))


def not_applicable(episode: Episode) -> None:
    """Never applies."""
    return None


def nan_reward(episode: Episode) -> float:
    """A buggy reward: NaN."""
    return float("nan")


def broken(episode: Episode) -> float:
    """A buggy reward: raises."""
    raise KeyError("gold_entity")


NOT_CALLABLE = 3
