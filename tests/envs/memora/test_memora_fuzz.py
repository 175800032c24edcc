"""Fuzzing MEMORA-v0's step with grammar fragments and random text: it never raises and its state stays valid."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragym.envs.events import events_of, registered_event_kinds
from ragym.envs.memora.env import MemoraEnv

FRAGMENTS = [
    "<reason>",
    "</reason>",
    "<reason>r</reason>",
    "<decompose>",
    "</decompose>",
    "<factor p=0.5>",
    "<factor p=-1>",
    "</factor>",
    "<subquery f=1>",
    "<subquery f=0>",
    "</subquery>",
    "<extract f=2>",
    "</extract>",
    "<e d=1 s=8>",
    "<e d=999 s=3>",
    "<e d=2 s=99>",
    "</e>",
    "<judge>",
    "3 > 1 > 2",
    "0",
    "</judge>",
    "<stop>",
    "</stop>",
    "cost price",
    " ",
    "\n",
    "<image>",
    "é",
    "<reason>r</reason><decompose><factor p=1>cost price</factor><factor p=1>risk</factor></decompose>",
    "<reason>r</reason><extract f=1><e d=1 s=9>x</e><e d=5 s=2>y</e></extract>",
    "<reason>r</reason><stop></stop>",
]
ENV = MemoraEnv(max_turns=8)
turns = st.lists(
    st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join) | st.text(max_size=40),
    min_size=1,
    max_size=10,
)


def check(info: dict, steps: int) -> None:
    events = info["events"]
    json.dumps(events)
    assert all(e["type"] in registered_event_kinds() and e["turn"] < steps for e in events)
    assert len(events_of(events, "action")) == steps
    view = info["view"]
    assert len(view["candidates"]) <= ENV.config.kc and view["pool_size"] <= ENV.config.max_pool
    assert all(n >= 0 for n in view["calls_left"].values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), actions=turns)
def test_random_turns_never_raise(seed: int, actions: list[str]) -> None:
    obs, info = ENV.reset(seed=seed)
    assert obs in ENV.observation_space
    for steps, action in enumerate(actions, 1):
        obs, reward, term, trunc, info = ENV.step(action)
        assert obs in ENV.observation_space and reward == 0.0
        check(info, steps)
        if term or trunc:
            assert len(events_of(info["events"], "final_ranking")) == 1
            assert len(events_of(info["events"], "memory_write")) == 1
            break
    else:
        assert steps < ENV.config.max_turns


def test_grammar_driven_random_policy_always_ends_with_a_ranking() -> None:
    rng = np.random.default_rng(0)
    env = MemoraEnv(max_turns=10)
    for seed in range(20):
        _, info = env.reset(seed=seed)
        for _ in range(env.config.max_turns):
            n = int(rng.integers(1, 60))
            action = str(
                rng.choice(
                    [
                        "<reason>r</reason><decompose><factor p=1>cost</factor><factor p=2>risk era</factor></decompose>",
                        f"<reason>r</reason><subquery f={int(rng.integers(1, 3))}>risk</subquery>",
                        f"<reason>r</reason><extract f=1><e d={n} s={rng.uniform(0, 10):.2f}>s</e></extract>",
                        f"<reason>r</reason><judge>{n} > 1</judge>",
                        "<reason>r</reason><stop></stop>",
                        "nonsense",
                    ]
                )
            )
            _, _, term, trunc, info = env.step(action)
            if term or trunc:
                break
        final = events_of(info["events"], "final_ranking")
        assert (term or trunc) and len(final) == 1
        assert len(final[0]["ranking"]) == len(set(final[0]["ranking"])) == info["view"]["pool_size"]
