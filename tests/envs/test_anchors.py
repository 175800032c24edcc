"""Anchor states (``ragym.envs.anchors``): every registered env declares them; an errored episode has none."""

from __future__ import annotations

import pytest

from ragym.envs import events as ev
from ragym.envs.anchors import turn_anchors
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.registry import registered_envs


def test_every_registered_env_declares_anchors() -> None:
    for env_id in registered_envs():
        assert turn_anchors(env_id, []) == {}
    with pytest.raises(KeyError, match="no anchor states registered"):
        turn_anchors("Nope-v0", [])


def test_an_episode_the_env_ended_by_raising_has_no_anchors() -> None:
    events = [kbvqa_ev.search_image(0, 1, 0, ["a"], "a", 0), ev.episode_error(1, "step", "boom")]
    assert turn_anchors("KBVQA-v0", events) == {}
