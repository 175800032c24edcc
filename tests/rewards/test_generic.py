"""The generic ``format`` term judges a turn the env never saw with the episode's own env's parser."""

from __future__ import annotations

import pytest

from ragym import envs
from ragym.envs import events as ev
from ragym.envs.hooks import env_hooks
from ragym.rewards import Episode, get_reward
from ragym.rewards.generic import register_turn_check, turn_parses

ENV_IDS = sorted(envs.registered_envs())
MALFORMED = "I pick the first one"


def cut_episode(env_id: str | None, text: str) -> Episode:
    """One turn cut by the length budget: the env never saw it, so no ``action`` event names it."""
    return Episode(
        "generic", [text], [ev.truncated(0, "max_response_length")], "x", truncated=True, env_id=env_id
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_an_unseen_turn_is_judged_by_its_envs_parser(env_id: str) -> None:
    hooks = env_hooks(env_id)
    assert hooks.format_action is not None and hooks.example_actions, f"{env_id}: no actions to write"
    for action in hooks.example_actions:
        text = hooks.format_action(action)
        assert get_reward("format")(cut_episode(env_id, text)) == 1.0, (env_id, text)
    assert get_reward("format")(cut_episode(env_id, MALFORMED)) == 0.0


def test_another_envs_grammar_does_not_count() -> None:
    """A well-formed turn of one env is malformed in another whose grammar it does not fit (MEMORA vs KB-VQA)."""
    memora = env_hooks("MEMORA-v0")
    found = [memora.format_action(a) for a in memora.example_actions]
    foreign = [t for t in found if not turn_parses(cut_episode("KBVQA-v0", t), t)]
    assert foreign, "every MEMORA example turn also parses as KB-VQA: pick envs whose grammars differ"
    for text in foreign:
        assert get_reward("format")(cut_episode("MEMORA-v0", text)) == 1.0
        assert get_reward("format")(cut_episode("KBVQA-v0", text)) == 0.0


def test_an_unseen_turn_without_an_env_id_is_an_error() -> None:
    with pytest.raises(ValueError, match="format needs the episode's env_id"):
        get_reward("format")(cut_episode(None, MALFORMED))
    seen = Episode("generic", ["t"], [ev.action(0, "answer", True)], "x")
    assert get_reward("format")(seen) == 1.0  # every turn seen by the env: no parser needed


def test_a_turn_check_is_registered_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_turn_check("kbvqa")(lambda episode, text: True)
