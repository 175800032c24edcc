"""Env observations as chat messages and the episode spec a dataset row carries (metrics: ``ragym.envs.metrics``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from ragym.envs.core import IMAGE_PLACEHOLDER

if TYPE_CHECKING:
    from ragym.rl.recipe.env_settings import EnvSettings

OBSERVATION_ROLE = "user"
"""Chat role of env observations: Qwen-VL templates render images in user turns on every version."""


@dataclass(frozen=True)
class EpisodeSpec:
    """What one dataset row asks the agent loop to run (parsed from its ``extra_info``)."""

    env_id: str
    """Registered env id, e.g. ``KBVQA-v0``."""
    env_kwargs: dict[str, Any]
    """Env constructor keyword arguments (``extra_info.env_kwargs``, a JSON object)."""
    env_options: dict[str, Any] | None
    """``reset(options=...)``: the row's episode (question, images, gold); None samples a synthetic one."""
    seed: int
    """``reset(seed=...)``: the row index, so synthetic episodes and env randomness are reproducible."""

    @classmethod
    def from_extra_info(cls, extra_info: dict[str, Any]) -> EpisodeSpec:
        """Parse and validate a row's ``extra_info``; errors name the row index and the bad field."""
        row = extra_info.get("index", "?")
        missing = {"env_id", "env_kwargs", "env_options"} - set(extra_info)
        if missing:
            raise ValueError(f"row {row}: extra_info lacks {sorted(missing)} (has {sorted(extra_info)})")
        kwargs = _json_field(extra_info, "env_kwargs", row)
        options = _json_field(extra_info, "env_options", row)
        if not isinstance(kwargs, dict) or not (options is None or isinstance(options, dict)):
            raise ValueError(f"row {row}: env_kwargs must be a JSON object and env_options an object or null")
        return cls(extra_info["env_id"], kwargs, options, int(extra_info.get("index", 0)))

    def recipe_env_kwargs(
        self, retrieval_url: str | None, images: Any, settings: EnvSettings | None = None
    ) -> dict[str, Any]:
        """The kwargs the row's env is built with: its ``env_kwargs`` plus the recipe's retrieval URL, image
        budget and env settings (``ragym.rl.recipe.retrieval`` / ``images`` / ``env_settings``; the agent loop and
        ``ragym budget`` both)."""
        from ragym.rl.recipe.env_settings import with_env_settings
        from ragym.rl.recipe.images import with_image_budget
        from ragym.rl.recipe.retrieval import with_retrieval_url

        kwargs = with_retrieval_url(self.env_id, self.env_kwargs, retrieval_url)
        kwargs = with_env_settings(self.env_id, kwargs, settings)
        return with_image_budget(self.env_id, kwargs, images)


def _json_field(extra_info: dict[str, Any], key: str, row: Any) -> Any:
    """A JSON-string field of ``extra_info`` (an already-decoded dict passes through)."""
    value = extra_info[key]
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"row {row}: extra_info.{key} is not valid JSON: {err}") from err


def to_pil(image: np.ndarray, turn: int) -> Image.Image:
    """An observation image (uint8 H x W x 3) as a PIL image; anything else is an env bug naming the turn."""
    if not (
        isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    ):
        shape = getattr(image, "shape", None)
        raise ValueError(
            f"turn {turn}: observation image must be uint8 (H, W, 3), got {type(image).__name__} {shape}"
        )
    return Image.fromarray(image)


def observation_message(obs: dict[str, Any], turn: int) -> tuple[dict[str, Any], list[Image.Image]]:
    """The chat message for ``obs`` and its PIL images in placeholder order.

    Images go where the text has ``<image>`` markers; text without markers gets its images first. Any other
    count mismatch, an image that is not uint8 RGB, or text that is not valid Unicode (the tokenizer refuses a
    lone surrogate) is an env bug and raises ``ValueError``, naming the turn.
    """
    images = [to_pil(image, turn) for image in obs["images"]]
    text = obs["text"]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"turn {turn}: observation text is not valid Unicode ({err.reason} at character {err.start})"
        ) from err
    pieces = text.split(IMAGE_PLACEHOLDER)
    num_markers = len(pieces) - 1
    if num_markers == 0:
        pieces = [""] * len(images) + pieces
    elif num_markers != len(images):
        raise ValueError(
            f"turn {turn}: observation text has {num_markers} {IMAGE_PLACEHOLDER} markers for {len(images)} images"
        )
    content: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if piece:
            content.append({"type": "text", "text": piece})
        if i < len(images):
            content.append({"type": "image", "image": images[i]})
    return {"role": OBSERVATION_ROLE, "content": content}, images
