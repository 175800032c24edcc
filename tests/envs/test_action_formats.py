"""Every env's ``format_action`` is the inverse of its parser: each example action (every kind the grammar has)
written, then parsed, is the same action. Scripted policies (the toy warm start's experts, ``ragym budget``'s
longest episodes, MEMORA's fixed pipeline) write their turns with it."""

from __future__ import annotations

import sys
import typing

import pytest

from ragym.envs.hooks import env_hooks, one_env_per_hooks

ENVS = one_env_per_hooks()
"""One env id per hooks (KB-VQA's demo env shares KB-VQA's)."""


@pytest.mark.parametrize("env_id", ENVS)
def test_every_action_kind_round_trips(env_id: str) -> None:
    hooks = env_hooks(env_id)
    assert hooks.format_action is not None and hooks.parse_action is not None, f"{env_id}: no action hooks"
    parser = getattr(hooks.parse_action, "func", hooks.parse_action)
    kinds = set(typing.get_args(sys.modules[parser.__module__].Action))
    assert {type(action) for action in hooks.example_actions} == kinds, (
        f"{env_id}: an action kind has no example"
    )
    for action in hooks.example_actions:
        text = hooks.format_action(action)
        assert hooks.parse_action(text) == action, text


@pytest.mark.parametrize("env_id", ENVS)
def test_a_formatted_turn_with_its_closing_tag_cut_off_does_not_parse_as_the_action(env_id: str) -> None:
    """The round trip is not vacuous: a damaged turn is not read back as the action."""
    hooks = env_hooks(env_id)
    for action in hooks.example_actions:
        text = hooks.format_action(action)
        assert hooks.parse_action(text[: text.rindex("</")]) != action, text
