"""Exact chat-turn token ids for verl's vision-language continuous-token builder, without re-running the processor.

verl's Qwen-VL builder renders every observation turn (and its constant synthetic prefix) through the full
multimodal processor: chat template, image preprocessing (resize, normalise, patchify) and a checked
tokenizer call. The agent loop only needs the token ids, and for Qwen-VL processors the ids depend on the
images only through the number of placeholder tokens each one expands to, which depends only on the image
size. ``RenderCache`` replaces the builder's ``render_tokens_with_mm`` with: the same chat template, the same
placeholder expansion with per-size counts taken once from the real processor, and the same tokenizer, plus
an LRU of token ids keyed by the conversation with every image reduced to its size (the G episodes of a GRPO
group share their first prompt, every observation turn re-renders the same synthetic prefix, and observations
repeat across episodes of the same question). Anything it does not cover (videos, audio, non-PIL images, callers
that want the processor's pixel outputs) goes to verl's own method.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from PIL import Image
from verl.utils.tokenizer.chat_template import apply_chat_template
from verl.utils.tokenizer.continuous_token import QwenVLContinuousTokenBuilder
from verl.utils.tokenizer.tokenizer import build_multimodal_processor_inputs, normalize_token_ids

_SCALARS = (str, int, float, bool, type(None))


class _Unkeyable(Exception):
    """A message holds a value the conversation key does not cover."""


def _value_key(value: Any) -> Any:
    """A hashable stand-in for one message or content-part value (an image part renders as a fixed placeholder)."""
    if isinstance(value, str):
        return value
    if isinstance(value, _SCALARS):  # typed: True, 1 and 1.0 are equal keys but may render differently
        return (type(value).__name__, value)
    if isinstance(value, Image.Image):
        return Image.Image  # a sentinel no JSON value equals
    if isinstance(value, list):
        return tuple(_value_key(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, _value_key(item)) for key, item in value.items())
    raise _Unkeyable(type(value).__name__)


def conversation_key(
    messages: list[dict[str, Any]], add_generation_prompt: bool, images: list[Image.Image]
) -> tuple | None:
    """What a render's token ids depend on: the messages (images as placeholders) and the image sizes; None if
    a message holds something else than JSON-like values and PIL images.

    Exact for chat templates that render an image part as a fixed placeholder (every Qwen-VL template does)
    and processors whose placeholder count depends on the image size only (Qwen2-VL's image processor).
    """
    try:
        return (_value_key(messages), add_generation_prompt, tuple(image.size for image in images))
    except _Unkeyable:
        return None


class RenderCache:
    """A drop-in ``render_tokens_with_mm`` for one verl VL continuous-token builder (see the module doc)."""

    def __init__(self, builder: QwenVLContinuousTokenBuilder, max_entries: int) -> None:
        self._builder = builder
        self._fallback = builder.render_tokens_with_mm  # verl's own method, bound before it is replaced
        self._processor = builder.processor
        self._image_token: str = self._processor.image_token
        self._image_token_id: int = self._processor.image_token_id
        self._video_token: str = self._processor.video_token
        self._max_entries = max_entries
        self._num_tokens: dict[tuple[int, int], int] = {}  # image (width, height) -> placeholder count
        self._ids: OrderedDict[tuple, list[int]] = OrderedDict()  # conversation key -> token ids
        self._lock = threading.Lock()  # verl also calls the builder from executor threads
        self.num_hits = 0
        self.num_fallbacks = 0

    @classmethod
    def install(cls, builder: Any, max_entries: int) -> RenderCache | None:
        """Replace ``builder.render_tokens_with_mm`` with a cached one; None (nothing changed) unless ``builder`` is
        verl's Qwen-VL builder (Qwen2/2.5/3-VL: the processors whose placeholder counts depend on size only)."""
        if not (isinstance(builder, QwenVLContinuousTokenBuilder) and builder.processor.tokenizer.is_fast):
            return None
        # Tokenizing with the backend (no Python wrapper) must equal the processor's tokenizer call.
        tokenizer, probe = builder.processor.tokenizer, "<|im_start|>user\n x<|im_end|>\n"
        if tokenizer(probe)["input_ids"] != tokenizer.backend_tokenizer.encode(probe).ids:
            return None
        cache = cls(builder, max_entries)
        builder.render_tokens_with_mm = cache.render_tokens_with_mm
        return cache

    def render_tokens_with_mm(
        self,
        messages: list[dict[str, Any]],
        images: list[Any] | None,
        *,
        videos: list[Any] | None = None,
        audios: list[Any] | None = None,
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        mm_inputs_out: dict[str, Any] | None = None,
    ) -> list[int]:
        """The token ids verl's ``render_tokens_with_mm`` returns for the same arguments."""
        images = list(images or [])
        ids = None
        if not (videos or audios or tools or mm_inputs_out is not None) and all(
            isinstance(image, Image.Image) for image in images
        ):
            key = conversation_key(messages, add_generation_prompt, images)
            with self._lock:
                ids = self._ids.get(key) if key is not None else None
                if ids is not None and key is not None:  # only a key finds ids
                    self._ids.move_to_end(key)
                    self.num_hits += 1
                    return list(ids)
            ids = self._render(messages, add_generation_prompt, images)
            if ids is not None and key is not None:
                with self._lock:
                    self._ids[key] = ids
                    if len(self._ids) > self._max_entries:
                        self._ids.popitem(last=False)
        if ids is not None:
            return list(ids)
        # Out of scope, or a placeholder/image mismatch: verl's path (and its error message).
        self.num_fallbacks += 1
        return self._fallback(
            messages,
            images,
            videos=videos,
            audios=audios,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            mm_inputs_out=mm_inputs_out,
        )

    def _render(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool, images: list[Image.Image]
    ) -> list[int] | None:
        """verl's render without the image preprocessing; None when the placeholders do not match the images."""
        # The processor's chat template, as verl renders it (not the tokenizer's).
        text = apply_chat_template(
            self._processor,
            messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self._builder.chat_template_kwargs,
        )
        assert isinstance(text, str)  # tokenize=False renders text (the helper's type covers token ids too)
        pieces = text.split(self._image_token)
        if len(pieces) - 1 != len(images) or self._video_token in text:
            return None
        # The processor's expansion: each placeholder becomes one image token per merged patch, in order.
        expanded = [pieces[0]]
        for image, piece in zip(images, pieces[1:], strict=True):
            expanded += [self._image_token * self._num_image_tokens(image), piece]
        return self._processor.tokenizer.backend_tokenizer.encode("".join(expanded)).ids

    def _num_image_tokens(self, image: Image.Image) -> int:
        """Placeholder tokens the processor expands ``image`` to, asked once per image size."""
        size = image.size
        if size not in self._num_tokens:
            # The real processor on a one-image text, with the builder's processor kwargs (min/max pixels).
            out = build_multimodal_processor_inputs(
                self._processor,
                text=[self._image_token],
                images=[image],
                mm_processor_kwargs=dict(self._builder.mm_processor_kwargs) or None,
            )
            self._num_tokens[size] = normalize_token_ids(out["input_ids"]).count(self._image_token_id)
        return self._num_tokens[size]
