"""Every registered env, walked automatically: gymnasium's check_env, a short fuzz, and its episode metrics.

A new ``register_env`` line is covered here with no test edit: it must build with no arguments (its built-in
synthetic task), pass check_env, survive random turns built from its own action tags, record only events of
known kinds, and have episode metrics registered in ``ragym.envs.metrics``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ragym import envs
from ragym.envs.events import registered_event_kinds
from ragym.envs.metrics import episode_metrics, registered_metrics
from ragym.envs.registry import make_env

JUNK = ["", "x", "<reason>", "</reason>", "()", "[1]", "1", "Reject()", '["q"]', "SearchImage(1)", "\n", "🙂"]
EPISODES = 3


def random_turn(rng: np.random.Generator, stop_strings: tuple[str, ...]) -> str:
    """A turn from the env's own action tags and junk: sometimes valid, mostly not."""
    tags = [s[2:-1] for s in stop_strings if s.startswith("</") and s.endswith(">")]
    if tags and rng.random() < 0.7:
        tag = tags[int(rng.integers(len(tags)))]
        body = "".join(rng.choice(JUNK, size=int(rng.integers(0, 3))))
        return f"<reason>r</reason><{tag}>{body}</{tag}>"
    return "".join(rng.choice(JUNK, size=int(rng.integers(0, 6))))


@pytest.mark.parametrize("env_id", sorted(envs.registered_envs()))
def test_registered_env_passes_check_env_and_a_fuzz(env_id: str) -> None:
    env = make_env(env_id)
    check_env(env, skip_render_check=True)
    assert env_id in registered_metrics(), f"{env_id} has no episode metrics in ragym.envs.metrics"
    rng = np.random.default_rng(0)
    for episode in range(EPISODES):
        obs, info = env.reset(seed=episode)
        assert env.observation_space.contains(obs)
        done, steps, before = False, 0, info["events"]
        while not done:
            obs, reward, terminated, truncated, info = env.step(random_turn(rng, env.stop_strings))
            steps += 1
            assert env.observation_space.contains(obs) and isinstance(reward, float)
            events = info["events"]
            assert events[: len(before)] == before  # events are appended, never rewritten
            assert {e["type"] for e in events} <= registered_event_kinds()
            assert all(-1 <= e["turn"] < steps for e in events)
            json.dumps(events)  # plain data only
            before, done = events, terminated or truncated
            assert steps <= 64, f"{env_id}: the episode did not end within 64 random turns"
        metrics = episode_metrics(env_id, events)
        assert (
            metrics["turns"] == steps
            and sum(v for k, v in metrics.items() if k.startswith("actions/")) == steps
        )
