"""Fuzz: random and adversarial turns never crash R3G-v0 and keep its protocol invariants."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragym import envs
from ragym.envs.events import events_of

FRAGMENTS = [
    "<plan>",
    "</plan>",
    "<retrieve>",
    "</retrieve>",
    "<judge>",
    "</judge>",
    "<answer>",
    "</answer>",
    "[1] r=0.5 t=1 a=0 x\n",
    "[2] r=9 t=1 a=1 y\n",
    "[0] r=1 t=1 a=1\n",
    "[99999] r=1 t=1 a=1 z\n",
    "r=",
    "a=nan",
    "x",
    " ",
    "\n",
    "\u202e",
    "\x00",
    "🙂",
    "<image>",
    "A",
    "[",
    "]",
]


def check_consistent(env, obs, info) -> None:
    """Invariants after every step."""
    assert env.observation_space.contains(obs)
    events = info["events"]
    json.dumps(events)
    assert len(events_of(events, "action")) == env.state.turn <= env.config.max_turns
    retrievals = events_of(events, "coarse_retrieval")
    assert len(retrievals) <= 1
    plans = events_of(events, "plan")
    if retrievals and env.config.use_plan:  # no evidence before a plan, ever
        assert plans and plans[0]["turn"] < retrievals[0]["turn"]
    selected = events_of(events, "evidence_selected")
    assert len(selected) <= 1
    if selected:
        assert retrievals and set(selected[0]["selected"]) <= set(retrievals[0]["pool"])
        assert len(selected[0]["selected"]) == env.config.top_k
    assert all(e["turn"] < env.config.max_turns for e in events)


def run(env, turns: list[str], seed: int) -> None:
    obs, info = env.reset(seed=seed)
    check_consistent(env, obs, info)
    for turn in turns:
        obs, _, terminated, truncated, info = env.step(turn)
        check_consistent(env, obs, info)
        if terminated or truncated:
            assert len(events_of(info["events"], "answer")) == 1
            obs, info = env.reset(seed=seed + 1)


def test_thousands_of_adversarial_turns(r3g_task: Path) -> None:
    rng = np.random.default_rng(0)
    for rerank, guidelines in (
        ("fused", True),
        ("stage1", True),
        ("stage2", True),
        ("none", True),
        ("fused", False),
    ):
        env = envs.make_env(
            "R3G-v0", task_dir=str(r3g_task), rerank=rerank, judge_guidelines=guidelines, max_turns=8
        )
        for episode in range(100):
            run(
                env,
                ["".join(rng.choice(FRAGMENTS, size=int(rng.integers(0, 10)))) for _ in range(8)],
                episode,
            )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=200), min_size=1, max_size=8), st.integers(0, 1000))
def test_random_unicode_turns(r3g_task: Path, turns: list[str], seed: int) -> None:
    run(envs.make_env("R3G-v0", task_dir=str(r3g_task)), turns, seed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(range(5)), min_size=1, max_size=10), st.booleans(), st.integers(0, 1000))
def test_random_valid_action_sequences(r3g_task: Path, choices: list[int], use_plan: bool, seed: int) -> None:
    env = envs.make_env("R3G-v0", task_dir=str(r3g_task), use_plan=use_plan, max_turns=10)
    turns = [
        "<plan>p</plan>",
        "<retrieve></retrieve>",
        "<judge>[1] r=1 t=1 a=1 ok\n[3] r=0 t=0 a=1 ok</judge>",
        "<judge>[2] r=0.1 t=0.1 a=0.1 meh</judge>",
        "<answer>B</answer>",
    ]
    run(env, [turns[c] for c in choices], seed)
