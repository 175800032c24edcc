"""Observation -> chat message conversion and the row's episode spec."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.envs.core import IMAGE_PLACEHOLDER as IMG
from ragym.rl.agent_loop.observations import EpisodeSpec, observation_message


def _images(n: int) -> tuple[np.ndarray, ...]:
    return tuple(np.full((8, 8, 3), i, dtype=np.uint8) for i in range(n))


def _shape(content) -> list[str]:
    return [
        part["text"] if part["type"] == "text" else f"img{int(np.asarray(part['image'])[0, 0, 0])}"
        for part in content
    ]


@pytest.mark.parametrize(
    ("text", "num_images", "expected"),
    [
        (f"Image 1: {IMG}\nQ?", 1, ["Image 1: ", "img0", "\nQ?"]),
        (f"{IMG}{IMG} two", 2, ["img0", "img1", " two"]),
        (f"[1] {IMG} a\n[2] {IMG} b", 2, ["[1] ", "img0", " a\n[2] ", "img1", " b"]),
        ("no markers", 2, ["img0", "img1", "no markers"]),
        ("text only", 0, ["text only"]),
        ("", 0, []),
    ],
)
def test_images_go_where_the_markers_are(text, num_images, expected):
    message, images = observation_message({"text": text, "images": _images(num_images)}, turn=0)
    assert message["role"] == "user"
    assert _shape(message["content"]) == expected
    assert len(images) == num_images


@pytest.mark.parametrize(
    ("obs", "match"),
    [
        (
            {"text": f"{IMG} {IMG}", "images": _images(1)},
            r"turn 3: observation text has 2 <image> markers for 1 images",
        ),
        (
            {"text": IMG, "images": (np.zeros((8, 8, 3), np.float32),)},
            "turn 3: observation image must be uint8",
        ),
        ({"text": IMG, "images": (np.zeros((8, 8), np.uint8),)}, "turn 3: observation image must be uint8"),
    ],
)
def test_bad_observations_name_the_turn(obs, match):
    with pytest.raises(ValueError, match=match):
        observation_message(obs, turn=3)


def test_episode_spec_parses_json_fields():
    spec = EpisodeSpec.from_extra_info(
        {
            "index": 4,
            "env_id": "KBVQA-v0",
            "env_kwargs": '{"kb_dir": "/kb"}',
            "env_options": '{"question": "q"}',
        }
    )
    assert spec == EpisodeSpec("KBVQA-v0", {"kb_dir": "/kb"}, {"question": "q"}, 4)
    assert (
        EpisodeSpec.from_extra_info({"env_id": "X", "env_kwargs": {}, "env_options": None}).env_options
        is None
    )
