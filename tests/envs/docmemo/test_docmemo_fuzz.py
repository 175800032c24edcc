"""Fuzzing DocMemo-v0's step with random grammar fragments: it never raises and its outputs stay valid."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.docmemo.env import DocMemoEnv
from ragym.envs.events import registered_event_kinds

FRAGMENTS = [
    "<reason>",
    "</reason>",
    "<reason>look</reason>",
    "<select>",
    "</select>",
    "<refine>",
    "</refine>",
    "<query>",
    "</query>",
    "<note>",
    "</note>",
    "<useful>",
    "</useful>",
    "<irrelevant>",
    "</irrelevant>",
    "<answer>",
    "</answer>",
    "1",
    "4",
    "19",
    "20",
    "21",
    "0",
    ",",
    " ",
    "Not answerable",
    "revenue",
    IMAGE_PLACEHOLDER,
    "\n",
    "é",
    "<select>4,6</select>",
    "<answer>1337</answer>",
    "<refine><query>tonnes</query><useful>4</useful><irrelevant>6</irrelevant></refine>",
]
ENV = DocMemoEnv(max_turns=6)
turns = st.lists(
    st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join) | st.text(max_size=40),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), actions=turns)
def test_random_turns_never_raise(seed, actions):
    obs, info = ENV.reset(seed=seed)
    assert obs in ENV.observation_space
    done, steps = False, 0
    for action in actions:
        obs, reward, term, trunc, info = ENV.step(action)
        steps += 1
        assert obs in ENV.observation_space and reward == 0.0
        assert obs["text"].count(IMAGE_PLACEHOLDER) == len(obs["images"])
        assert all(e["turn"] < steps and e["type"] in registered_event_kinds() for e in info["events"])
        if term or trunc:
            done = True
            break
    assert done or steps < ENV.config.max_turns
    assert sum(e["type"] == "action" for e in info["events"]) == steps
    json.dumps(info["events"])


def test_grammar_driven_random_policy_finishes_every_episode():
    rng = np.random.default_rng(0)
    for seed in range(15):
        _, info = ENV.reset(seed=seed)
        for _ in range(ENV.config.max_turns):
            pages = info["events"][-1].get("pages") or [1]
            page = int(rng.choice(pages))
            action = str(
                rng.choice(
                    [
                        f"<reason>r</reason><select>{page}</select>",
                        f"<reason>r</reason><refine><query>q{seed}</query><useful>{page}</useful></refine>",
                        "<reason>r</reason><answer>1200</answer>",
                        "nonsense",
                    ]
                )
            )
            _, _, term, trunc, info = ENV.step(action)
            if term or trunc:
                break
        assert term or trunc
