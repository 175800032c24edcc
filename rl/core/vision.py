"""Vision inputs shared by generation and training: cached image preprocessing and M-RoPE positions.

Every turn re-sends all images of the episode, and the G episodes of a group carry equal copies of the
same query image, so images are preprocessed once, keyed by their content.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from ragym.envs.byte_cache import ByteLRU
from ragym.envs.image_cache import content_digest
from ragym.envs.image_ref import ImageRef, as_pixels


def image_key(image: Any) -> str:
    """A content fingerprint of a PIL image, a uint8 array or an ``ImageRef`` (equal pixels -> equal key: a reference
    and the image it refers to share one)."""
    if isinstance(image, ImageRef):
        return image.digest
    return content_digest(np.asarray(image, dtype=np.uint8))


DEFAULT_CACHE_BYTES = 2 << 30
"""Preprocessed images one ``ImageInputs`` keeps: float32 patches are ~20x the bytes of the uint8 image."""


def image_processor_kwargs(mm_processor_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """verl's ``data.mm_processor_kwargs`` (``min_pixels`` / ``max_pixels``, what the full processor and vLLM
    take) as the image processor's own keyword: the pixel range as ``size`` (it ignores ``max_pixels``)."""
    kwargs = dict(mm_processor_kwargs or {})
    bounds = {key: kwargs.pop(key) for key in ("min_pixels", "max_pixels") if key in kwargs}
    if kwargs:
        raise ValueError(f"image preprocessing takes min_pixels / max_pixels only, got {sorted(kwargs)}")
    if len(bounds) == 1:
        raise ValueError(f"give both min_pixels and max_pixels, or neither; got {bounds}")
    if not bounds:
        return {}
    return {"size": {"shortest_edge": int(bounds["min_pixels"]), "longest_edge": int(bounds["max_pixels"])}}


class ImageInputs:
    """Turns a list of images (PIL, uint8 arrays or ``ImageRef``s) into the model's ``pixel_values`` /
    ``image_grid_thw``, caching per image.

    ``mm_processor_kwargs`` are the recipe's (``data.mm_processor_kwargs``): the pixel range verl's processor
    and the agent loop's placeholder counts use, so features and placeholders agree. The cache is bounded
    in bytes (``max_cached_bytes``)."""

    def __init__(
        self,
        image_processor: Any,
        mm_processor_kwargs: dict[str, Any] | None = None,
        max_cached_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.image_processor = image_processor
        self.kwargs = image_processor_kwargs(mm_processor_kwargs)
        self._cache: ByteLRU[tuple[torch.Tensor, torch.Tensor]] = ByteLRU(max_cached_bytes)

    def _one(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self._cache.get_or_compute(image_key(image), lambda: self._preprocess(image), _nbytes)

    def _preprocess(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        image = as_pixels(image)  # a reference resolves only here, when its features are not cached
        if not isinstance(image, Image.Image):
            image = Image.fromarray(np.asarray(image, dtype=np.uint8))
        out = self.image_processor(images=[image], return_tensors="pt", **self.kwargs)
        return out["pixel_values"], out["image_grid_thw"]

    def encode(self, images: list[Any]) -> dict[str, torch.Tensor]:
        """Model keyword arguments for ``images`` in placeholder order; empty when there are none."""
        if not images:
            return {}
        parts = [self._one(image) for image in images]
        return {
            "pixel_values": torch.cat([p for p, _ in parts]),  # [num_patches, patch_dim]
            "image_grid_thw": torch.cat([g for _, g in parts]),  # [num_images, 3]
        }


def _nbytes(entry: tuple[torch.Tensor, torch.Tensor]) -> int:
    return sum(t.element_size() * t.nelement() for t in entry)


def rope_positions(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, image_grid_thw: torch.Tensor | None
) -> torch.Tensor:
    """Qwen-VL M-RoPE position ids [3, B, L] for padded ``input_ids`` (pads ignored via ``attention_mask``).

    Computed explicitly so neither generation nor training depends on the model's cached ``rope_deltas``.
    """
    token_types = (input_ids == model.config.image_token_id).int()
    positions, _ = model.model.get_rope_index(
        input_ids, token_types, image_grid_thw=image_grid_thw, attention_mask=attention_mask
    )
    return positions
