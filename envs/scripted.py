"""Scripted policies' episodes: ``run_episode`` plays any policy with ``reset(obs)`` and ``act(text)`` on an env.

Every env's hooks (its expert, its longest episode), ``ragym rollout`` and the warm starts play scripted policies
through it, so it lives beside the envs rather than above them.
"""

from __future__ import annotations

from typing import Any


class OneTurn:
    """A scripted policy that ends the episode at once with one well-formed final action."""

    def __init__(self, text: str) -> None:
        self.text = text

    def reset(self, obs: dict[str, Any]) -> None:
        """Nothing to remember."""

    def act(self, obs_text: str) -> str:
        """The final action."""
        return self.text


def run_episode(env: Any, policy: Any, seed: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One episode; returns the turn texts, final events and whether it was truncated."""
    obs, info = env.reset(seed=seed, options=options)
    policy.reset(obs)
    turns, done, truncated = [], False, False
    while not done:
        turns.append(policy.act(obs["text"]))
        obs, _, terminated, truncated, info = env.step(turns[-1])
        done = terminated or truncated
    return {"turns": turns, "events": info["events"], "truncated": truncated}
