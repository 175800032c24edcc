"""Anchor states: each env's declaration, from events before the turn; every registered env declares one."""

from __future__ import annotations

import json

import pytest

from ragym.envs import events as ev
from ragym.envs.anchors import turn_anchors
from ragym.envs.registry import registered_envs


def test_every_registered_env_declares_anchors() -> None:
    for env_id in registered_envs():
        assert turn_anchors(env_id, []) == {}
    with pytest.raises(KeyError, match="no anchor states registered"):
        turn_anchors("Nope-v0", [])


def test_kbvqa_anchor_is_the_image_and_batch_the_next_turn_verifies() -> None:
    events = [
        ev.search_image(0, 2, 0, ["a", "b"], "b", 0),
        ev.verification(1, "reject", None, 2, 0, ["a", "b"], "b"),
        ev.search_image(1, 2, 1, ["c", "d"], "b", 2),
    ]
    anchors = turn_anchors("KBVQA-v0", events)
    assert {t: json.loads(a) for t, a in anchors.items()} == {1: ["batch", 2, 0, ["a", "b"]],
                                                               2: ["batch", 2, 1, ["c", "d"]]}  # fmt: skip
    assert turn_anchors("KBVQA-Demo-v0", events) == anchors


def test_docmemo_anchor_is_the_round_and_view_and_turn_zero_has_none() -> None:
    events = [
        ev.candidates(-1, 0, "q", 0.5, [1, 2], [0.9, 0.1], [0.5] * 4),
        ev.selected(0, 0, [1], [1]),
        ev.evidence(0, 0, [1], [0.5], [1]),
        ev.feedback(1, 0, "q2", "n", [1], []),
        ev.candidates(1, 1, "q2", 0.4, [3, 4], [0.8, 0.2], [0.5] * 4),
    ]
    anchors = turn_anchors("DocMemo-v0", events)
    assert {t: json.loads(a) for t, a in anchors.items()} == {1: ["evidence", 0], 2: ["candidates", 1]}


def test_r3g_anchor_is_the_pool_for_the_judge_and_the_evidence_for_the_answer() -> None:
    events = [
        ev.plan(0, "cues"),
        ev.coarse_retrieval(1, ["x", "g"], [0.9, 0.8], [0.6, 0.4], ["g"]),
        ev.evidence_selected(2, ["x", "g"], [0.6, 0.4], [0.1, 0.9], [0.7, 1.3], [1], ["g"], "fused"),
    ]
    anchors = {t: json.loads(a) for t, a in turn_anchors("R3G-v0", events).items()}
    assert anchors == {2: ["pool", ["x", "g"]], 3: ["evidence", ["g"]]}


def test_memora_anchor_is_the_pool_and_the_actions_so_far() -> None:
    events = [
        ev.first_stage("q1", ["d2", "d1"], [2.0, 1.0]),
        ev.action(0, "decompose", True),
        ev.action(1, "subquery", True),
        ev.subquery(1, 1, "sq", ["d3", "d1"], ["d3"], 3),
        ev.action(2, "invalid", False),
    ]
    anchors = {t: json.loads(a) for t, a in turn_anchors("MEMORA-v0", events).items()}
    assert anchors == {
        1: ["pool", ["d1", "d2"], ["decompose"]],
        2: ["pool", ["d1", "d2", "d3"], ["decompose", "subquery"]],
        3: ["pool", ["d1", "d2", "d3"], ["decompose", "subquery"]],
    }


def test_an_episode_the_env_ended_by_raising_has_no_anchors() -> None:
    events = [ev.search_image(0, 1, 0, ["a"], "a", 0), ev.episode_error(1, "step", "boom")]
    assert turn_anchors("KBVQA-v0", events) == {}
