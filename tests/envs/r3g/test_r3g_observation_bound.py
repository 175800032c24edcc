"""R3G-v0 observations within ``max_obs_chars``: a text over the bound loses its end, marked and recorded as an
``observation_cut`` event, and a cut that would drop an image placeholder while its image is sent is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.envs import make_env
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.events import events_of
from tests.envs.r3g.test_r3g_env import PLAN, RETRIEVE, first_row


def test_a_question_over_the_bound_loses_its_end_and_keeps_the_query_image(r3g_task: Path) -> None:
    env = make_env("R3G-v0", task_dir=str(r3g_task), max_obs_chars=400)
    obs, info = env.reset(options={**first_row(r3g_task), "question": "Which part? " * 100})
    assert len(obs["text"]) == 400 and obs["text"].endswith("… [cut]") and env.observation_space.contains(obs)
    assert obs["text"].count(IMAGE_PLACEHOLDER) == len(obs["images"]) == 1
    assert [e["part"] for e in events_of(info["events"], "observation_cut")] == ["tail"]


def test_a_pool_cut_that_would_drop_image_placeholders_is_an_error(r3g_task: Path) -> None:
    env = make_env("R3G-v0", task_dir=str(r3g_task), max_obs_chars=70)
    env.reset(options=first_row(r3g_task))
    env.step(PLAN)
    with pytest.raises(
        ValueError, match=r"R3GEnv observation .* max_obs_chars=70 keeps 1 of 5 image placeholders"
    ):
        env.step(RETRIEVE)


def test_an_episode_that_fits_records_no_cut(r3g_task: Path) -> None:
    env = make_env("R3G-v0", task_dir=str(r3g_task))
    _, info = env.reset(options=first_row(r3g_task))
    env.step(PLAN)
    obs, *_, info = env.step(RETRIEVE)
    assert obs["text"].count(IMAGE_PLACEHOLDER) == 5 and not events_of(info["events"], "observation_cut")
