"""Fuzz: thousands of random and adversarial turns never crash the env and keep its state consistent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragym import envs
from ragym.envs.events import events_of

FRAGMENTS = [
    "<reason>",
    "</reason>",
    "<search_call>",
    "</search_call>",
    "<rerank>",
    "</rerank>",
    "<answer>",
    "</answer>",
    "SearchImage(1)",
    "SearchImage(2)",
    "SearchImage(-3)",
    "SearchImage(999999)",
    'SearchText(["recorded"])',
    "SearchText([",
    "Reject()",
    "Reject",
    "x",
    " ",
    "\n",
    "\u202e",
    "\x00",
    "🙂",
    "{",
    '"',
    "<",
    ">",
    "()",
    "Amber",
    "Cobalt",
    "<image>",
    "<reason/>",
    "<RERANK>",
]


def adversarial(rng: np.random.Generator) -> str:
    """A turn assembled from grammar fragments, sometimes valid, mostly not."""
    return "".join(rng.choice(FRAGMENTS, size=int(rng.integers(0, 12))))


def check_consistent(env, obs, info) -> None:
    """Invariants that must hold after every step."""
    assert env.observation_space.contains(obs)
    events = info["events"]
    json.dumps(events)  # plain data only
    assert len(events_of(events, "action")) == env.state.turn <= env.config.max_turns
    decided = [(e["image"], e["batch_id"]) for e in events_of(events, "verification")]
    assert len(decided) == len(set(decided))  # one decision per batch, ever
    served = events_of(events, "search_image")
    assert len({b["batch_id"] for b in served}) == len(served)
    for image in {b["image"] for b in served}:
        offsets = [b["offset"] for b in served if b["image"] == image]
        assert offsets == sorted(set(offsets))  # pages of one image never overlap or repeat
        assert len(offsets) <= env.config.max_rejections + 1
    assert all(e["turn"] < env.config.max_turns for e in events)


def run(env, turns: list[str], seed: int) -> None:
    obs, info = env.reset(seed=seed)
    check_consistent(env, obs, info)
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(turn)
        check_consistent(env, obs, info)
        if terminated or truncated:
            assert len(events_of(info["events"], "answer")) == 1
            obs, info = env.reset(seed=seed + 1)


def test_thousands_of_adversarial_turns(tiny_kb: Path) -> None:
    env = envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb), max_turns=12)
    rng = np.random.default_rng(0)
    for episode in range(300):
        run(env, [adversarial(rng) for _ in range(12)], seed=episode)  # 3600 turns


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=300), min_size=1, max_size=10), st.integers(0, 1000))
def test_random_unicode_turns(tiny_kb: Path, turns: list[str], seed: int) -> None:
    env = envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb))
    run(env, turns, seed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(range(6)), min_size=1, max_size=14), st.integers(0, 1000))
def test_random_valid_action_sequences(tiny_kb: Path, choices: list[int], seed: int) -> None:
    env = envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb), max_turns=14)
    turns = [
        "<reason>r</reason><search_call>SearchImage(1)</search_call>",
        "<reason>r</reason><search_call>SearchImage(2)</search_call>",
        "<reason>r</reason><rerank>Reject()</rerank>",
        '<reason>r</reason><search_call>SearchText(["recorded"])</search_call>',
        "<reason>r</reason><rerank>Amber Nothing Spire</rerank>",
        "<reason>r</reason><answer>1900</answer>",
    ]
    run(env, [turns[c] for c in choices], seed)
