"""Vision inputs shared by generation and training: cached image preprocessing and M-RoPE positions.

Every turn re-sends all images of the episode, and the G episodes of a group carry equal copies of the
same query image, so images are preprocessed once, keyed by their content.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import torch
from PIL import Image


def image_key(image: Any) -> int:
    """A content fingerprint of a PIL image or a uint8 array (equal pixels -> equal key)."""
    if isinstance(image, Image.Image):
        return hash((image.mode, image.size, image.tobytes()))
    array = np.ascontiguousarray(image)
    return hash((array.shape, str(array.dtype), array.tobytes()))


class ImageInputs:
    """Turns a list of images into the model's ``pixel_values`` / ``image_grid_thw``, caching per image."""

    def __init__(self, image_processor: Any, max_cached: int = 4096) -> None:
        self.image_processor = image_processor
        self.max_cached = max_cached
        self._cache: OrderedDict[int, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()

    def _one(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        key = image_key(image)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        if not isinstance(image, Image.Image):
            image = Image.fromarray(np.asarray(image, dtype=np.uint8))
        out = self.image_processor(images=[image], return_tensors="pt")
        entry = (out["pixel_values"], out["image_grid_thw"])
        self._cache[key] = entry
        if len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return entry

    def encode(self, images: list[Any]) -> dict[str, torch.Tensor]:
        """Model keyword arguments for ``images`` in placeholder order; empty when there are none."""
        if not images:
            return {}
        parts = [self._one(image) for image in images]
        return {
            "pixel_values": torch.cat([p for p, _ in parts]),  # [num_patches, patch_dim]
            "image_grid_thw": torch.cat([g for _, g in parts]),  # [num_images, 3]
        }


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
