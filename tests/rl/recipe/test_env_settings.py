"""The recipe's env settings (``ragym.env``: Rej_max) reach every row's env that has them, rows prepped with
another value are refused, and the recipe's turn cap is checked against each env's own T_max."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from ragym.envs.events import events_of
from ragym.envs.registry import make_env
from ragym.rl.agent_loop.observations import EpisodeSpec
from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import _ragym_known
from ragym.rl.recipe.env_settings import (
    EnvSettings,
    recipe_env_settings,
    turn_cap_problem,
    with_env_settings,
)


def settings_of(section: dict | None) -> EnvSettings:
    return recipe_env_settings(OmegaConf.create({} if section is None else {"ragym": {"env": section}}))


def test_the_recipe_key_is_read_once_and_checked() -> None:
    assert settings_of(None) == EnvSettings() and settings_of(None).env_kwargs() == {}
    assert settings_of({"max_rejections": 1}).env_kwargs() == {"max_rejections": 1}
    assert _ragym_known("ragym.env.max_rejections") and not _ragym_known("ragym.env.rej_max")
    with pytest.raises(UsageError, match=r"ragym.env takes only \['max_rejections'\]"):
        settings_of({"rej_max": 2})
    for bad in (-1, True, "2"):
        with pytest.raises(UsageError, match="max_rejections must be null or an int >= 0"):
            settings_of({"max_rejections": bad})


def test_the_setting_reaches_the_envs_that_have_it_and_changes_the_episode() -> None:
    settings = EnvSettings(max_rejections=0)
    kwargs = with_env_settings("KBVQA-v0", {"preset": "tiny"}, settings)
    assert kwargs == {"preset": "tiny", "max_rejections": 0}
    assert with_env_settings("R3G-v0", {"preset": "tiny"}, settings) == {"preset": "tiny"}  # no such field
    assert with_env_settings("KBVQA-v0", {"preset": "tiny"}, None) == {"preset": "tiny"}
    # The env runs with the recipe's Rej_max: its task event says so, and a Reject brings the boundary prompt.
    env = make_env("KBVQA-v0", **kwargs)
    _, info = env.reset(seed=0)
    assert events_of(info["events"], "task")[0]["max_rejections"] == 0
    env.step("<reason>look</reason><search_call>SearchImage(1)</search_call>")
    _, _, _, _, info = env.step("<reason>no</reason><rerank>Reject()</rerank>")
    assert events_of(info["events"], "boundary"), [e["type"] for e in info["events"]]


def test_a_row_prepped_with_another_value_is_refused_not_mixed() -> None:
    settings = EnvSettings(max_rejections=2)
    assert with_env_settings("KBVQA-v0", {"max_rejections": 2}, settings)["max_rejections"] == 2
    with pytest.raises(
        ValueError,
        match=r"KBVQA-v0 row was prepped with max_rejections=1, but the recipe sets "
        r"ragym.env.max_rejections=2",
    ):
        with_env_settings("KBVQA-v0", {"max_rejections": 1}, settings)
    # The agent loop and ragym budget build every row's env through the spec, so both refuse the row.
    row = {"env_id": "KBVQA-Demo-v0", "env_kwargs": json.dumps({"max_rejections": 1}), "env_options": "null"}
    spec = EpisodeSpec.from_extra_info(row)
    assert spec.recipe_env_kwargs(None, None)["max_rejections"] == 1  # no recipe setting: the row's own
    with pytest.raises(ValueError, match="prepped with max_rejections=1"):
        spec.recipe_env_kwargs(None, None, settings)


def test_a_turn_cap_below_the_envs_t_max_is_named() -> None:
    kbvqa = make_env("KBVQA-v0", max_turns=8)
    problem = turn_cap_problem("KBVQA-v0", kbvqa, 6)
    assert problem is not None and "max_assistant_turns=6 is below KBVQA-v0's max_turns=8" in problem
    assert "last-turn notice and forced answer" in problem
    assert (
        turn_cap_problem("KBVQA-v0", kbvqa, 8) is None and turn_cap_problem("KBVQA-v0", kbvqa, None) is None
    )
    assert turn_cap_problem("R3G-v0", make_env("R3G-v0"), 6) is None  # R3G's T_max is 6
    assert turn_cap_problem("X", object(), 1) is None  # an env outside the shared loop states no T_max
