"""The paper's longest episode of each env, played by a scripted policy on the env the agent loop would build.

Each env's hooks play it (``EnvHooks.longest_episode``, in ``envs/<env>/hooks.py``): KB-VQA pages every query image
to its last batch, R3G judges every pooled image, MEMORA runs its fixed pipeline with K_max factors, DocMemo selects
every candidate in every round. The env's own T_max, last-turn notice and forced end cut each where it runs out of
turns, as do the recipe's ``max_assistant_turns``; each turn is the scripted text, so a real policy's reasoning is
longer (``ragym budget --action-tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium

from ragym.envs.hooks import MissingHook, envs_with, hook
from ragym.rl.errors import UsageError


@dataclass(frozen=True)
class Played:
    """One episode as the agent loop would see it: the generated turns and every observation (the task first)."""

    turns: list[str]
    """The policy's turn texts, in order."""
    observations: list[dict[str, Any]]
    """The task observation, then the observation after each turn (the one after the last is not in context)."""


class TurnCap(gymnasium.Wrapper):
    """Logs every observation and ends the episode after ``max_turns`` turns, as the agent loop's
    ``max_assistant_turns`` does (None: the env's own budget only)."""

    def __init__(self, env: gymnasium.Env, max_turns: int | None) -> None:
        super().__init__(env)
        self.max_turns = max_turns
        self.observations: list[dict[str, Any]] = []
        self.turns: list[str] = []

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset and start the log with the task observation."""
        obs, info = self.env.reset(**kwargs)
        self.observations, self.turns = [obs], []
        return obs, info

    def step(self, action: Any) -> tuple[Any, ...]:
        """Step, log the turn and its observation, and truncate at the cap."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns.append(str(action))
        self.observations.append(obs)
        capped = self.max_turns is not None and len(self.turns) >= self.max_turns
        return obs, reward, terminated, truncated or (capped and not terminated), info


def play_longest(
    env_id: str, env: Any, options: dict[str, Any] | None, seed: int, max_turns: int | None
) -> Played:
    """Play the paper's longest ``env_id`` episode on ``env`` (reset with ``seed`` and the row's ``options``),
    ended after ``max_turns`` turns at most (the recipe's ``max_assistant_turns``)."""
    play = longest_episode_of(env_id)
    log = TurnCap(env, max_turns)
    play(log, options, seed)
    return Played(list(log.turns), list(log.observations))


def longest_episode_of(env_id: str) -> Any:
    """``env_id``'s ``EnvHooks.longest_episode``; an env without one is a usage error naming those with it."""
    try:
        return hook(env_id, "longest_episode", "ragym budget")
    except MissingHook as err:
        raise UsageError(f"{err}; ragym budget knows {', '.join(envs_with('longest_episode'))}") from None
