"""Tokens of one played episode, as the agent loop would put them in context.

Text: the conversation rendered with the tokenizer's chat template (the system prompt and the task in the
prompt; every turn and every observation in context after it), minus the three vision tokens the template writes
per image; without a tokenizer, characters / 3.5 plus the ChatML scaffold (labelled estimated). Visual: each
shown image's size resized by the processor's own rule (``ragym.envs.image_budget.fit_size``, equal to
transformers' ``smart_resize``) at the recipe's pixel range, one token per ``factor x factor`` block, plus the two
vision markers around it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ragym.envs.image_budget import fit_size, visual_tokens
from ragym.rl.agent_loop.observations import observation_message
from ragym.rl.budget.episodes import Played
from ragym.rl.errors import UsageError
from ragym.rl.recipe.images import IMAGES_KEY, recipe_images, recipe_processor_kwargs

CHARS_PER_TOKEN = 3.5
"""Characters per text token when no tokenizer is available (``--estimate-text``)."""
VISION_MARKERS = 2
"""``<|vision_start|>`` and ``<|vision_end|>`` around each image's pad tokens."""
VISION_TOKENS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")
"""What a Qwen-VL chat template writes per image before the processor expands the pad."""
SCAFFOLD_TOKENS = 5
"""``<|im_start|>ROLE\\n`` ... ``<|im_end|>\\n`` around each message when there is no chat template."""
GENERATION_PROMPT_TOKENS = 3
"""``<|im_start|>assistant\\n`` after the prompt when there is no chat template."""
MODEL_PIXELS = {28: (56 * 56, 12_845_056), 32: (256 * 256, 16_777_216)}
"""factor -> the processor's own (min_pixels, max_pixels): Qwen2.5-VL's and Qwen3-VL's shipped settings."""


@dataclass(frozen=True)
class PixelRule:
    """The processor's resize: images are resized to multiples of ``factor`` with an area in the range."""

    factor: int
    min_pixels: int
    max_pixels: int
    source: str
    """Where the range comes from (the recipe's ``data.mm_processor_kwargs`` or the model's own)."""

    def tokens(self, height: int, width: int) -> int:
        """Visual tokens the processor gives a ``height x width`` image (markers not included)."""
        fitted = fit_size(height, width, self.max_pixels, self.min_pixels, self.factor)
        return visual_tokens(*fitted, self.factor)


def _model_processor(model_dir: Path | None) -> tuple[int, int, int, str] | None:
    """(factor, min_pixels, max_pixels, file) of a model folder's image processor settings, if it has them:
    ``preprocessor_config.json`` (the Qwen checkpoints) or ``processor_config.json``'s ``image_processor``."""
    if model_dir is None:
        return None
    flat, nested = model_dir / "preprocessor_config.json", model_dir / "processor_config.json"
    if flat.is_file():
        path, pre = flat, json.loads(flat.read_text())
    elif nested.is_file() and "image_processor" in json.loads(nested.read_text()):
        path, pre = nested, json.loads(nested.read_text())["image_processor"]
    else:
        return None
    size = pre.get("size") or {}
    least = pre.get("min_pixels") or size.get("shortest_edge")
    most = pre.get("max_pixels") or size.get("longest_edge")
    if least is None or most is None:
        raise UsageError(
            f"{path} gives no pixel range (min_pixels and max_pixels, or size's shortest_edge and "
            "longest_edge); set data.mm_processor_kwargs in the recipe"
        )
    return int(pre["patch_size"]) * int(pre.get("merge_size", 2)), int(least), int(most), str(path)


def pixel_rule(config: DictConfig, model_dir: Path | None) -> PixelRule:
    """The recipe's pixel range and factor (``ragym.images``, ``data.mm_processor_kwargs``), else the model's."""
    images, kwargs, model = (
        recipe_images(config),
        recipe_processor_kwargs(config),
        _model_processor(model_dir),
    )
    factor = images.budget.image_factor if images else model[0] if model else 28
    if images and model and model[0] != factor:
        raise UsageError(f"{IMAGES_KEY}.factor is {factor} but {model_dir} has patch x merge {model[0]}")
    if kwargs:
        return PixelRule(
            factor, int(kwargs["min_pixels"]), int(kwargs["max_pixels"]), "data.mm_processor_kwargs"
        )
    if model:
        return PixelRule(factor, model[1], model[2], model[3])
    least, most = MODEL_PIXELS.get(factor, MODEL_PIXELS[28])
    return PixelRule(factor, least, most, "the model's own range (the recipe sets none)")


class TextCounter:
    """Text tokens of conversations: a tokenizer (its chat template when it has one), or chars / 3.5."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self.estimated = tokenizer is None
        self.templated = tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
        ids = (
            [tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS]
            if tokenizer is not None and self.templated
            else []
        )
        self._vision_ids = {i for i in ids if i is not None and i != getattr(tokenizer, "unk_token_id", None)}

    def text(self, text: str) -> int:
        """Tokens of ``text`` on its own."""
        if self.tokenizer is None:
            return math.ceil(len(text) / CHARS_PER_TOKEN)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def conversation(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> int:
        """Text tokens of ``messages`` rendered for the model (scaffold included, images not)."""
        if self.tokenizer is not None and self.templated:
            rendered = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
            ids = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
            return sum(1 for i in ids if i not in self._vision_ids)
        pieces = [_text_of(m["content"]) for m in messages]
        scaffold = SCAFFOLD_TOKENS * len(messages) + (
            GENERATION_PROMPT_TOKENS if add_generation_prompt else 0
        )
        return scaffold + sum(self.text(p) for p in pieces if p)

    def describe(self, source: str) -> str:
        """What the text counts are, for the report."""
        if self.estimated:
            return f"text ESTIMATED as characters / {CHARS_PER_TOKEN} (no tokenizer) plus the chat scaffold"
        how = "its chat template" if self.templated else "a ChatML scaffold estimate (no chat template)"
        return f"text tokens from the tokenizer at {source} with {how}"


def _text_of(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


@dataclass(frozen=True)
class EpisodeTokens:
    """Tokens of one episode: the prompt (system + task) and the response (every turn after it)."""

    index: Any
    """The row's ``extra_info.index``."""
    env_id: str
    turns: int
    """Policy turns played."""
    num_images: int
    """Images shown after the prompt."""
    prompt_text: int
    prompt_visual: int
    response_actions: int
    """The generated turns (each at least the ``--action-tokens`` allowance)."""
    response_obs_text: int
    """Observation text and the chat scaffold between turns."""
    response_obs_visual: int

    @property
    def prompt(self) -> int:
        """All prompt tokens."""
        return self.prompt_text + self.prompt_visual

    @property
    def response(self) -> int:
        """All response tokens."""
        return self.response_actions + self.response_obs_text + self.response_obs_visual


def _message(obs: dict[str, Any], turn: int, pixels: PixelRule) -> tuple[dict[str, Any], int, int]:
    """The observation's chat message with bare image parts, its image count and visual tokens."""
    message, images = observation_message(obs, turn)
    content = [{"type": "image"} if part["type"] == "image" else part for part in message["content"]]
    visual = sum(pixels.tokens(im.height, im.width) + VISION_MARKERS for im in images)
    return {**message, "content": content}, len(images), visual


def count_episode(
    played: Played,
    system_prompt: str,
    index: Any,
    env_id: str,
    text: TextCounter,
    pixels: PixelRule,
    action_tokens: int,
) -> EpisodeTokens:
    """Tokens of ``played`` as the agent loop builds its context: the observation after the last turn is not in it."""
    first, _, prompt_visual = _message(played.observations[0], -1, pixels)
    messages = [{"role": "system", "content": system_prompt}, first]
    prompt_text = text.conversation(messages, add_generation_prompt=True)
    num_images = visual = 0
    for turn, (action, obs) in enumerate(zip(played.turns[:-1], played.observations[1:], strict=False)):
        message, count, tokens = _message(obs, turn, pixels)
        messages += [{"role": "assistant", "content": action}, message]
        num_images, visual = num_images + count, visual + tokens
    generated = [text.text(t) for t in played.turns] or [0]
    # Everything after the prompt up to the last turn's generation prompt, then the last turn itself.
    context = text.conversation(messages, add_generation_prompt=True) - prompt_text + generated[-1]
    return EpisodeTokens(
        index=index,
        env_id=env_id,
        turns=len(played.turns),
        num_images=num_images,
        prompt_text=prompt_text,
        prompt_visual=prompt_visual,
        response_actions=sum(max(n, action_tokens) for n in generated),
        response_obs_text=context - sum(generated),
        response_obs_visual=visual,
    )
