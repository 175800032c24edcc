"""The vision tower's share of one GPU in the update, and the micro-batch's images at the recipe's image budget.

A Qwen-VL micro-batch of T tokens that holds N images of K visual tokens each feeds the vision tower P = N x K x m
patches (m: patches merged into one token, 4). Per GPU:

- inputs: P x D x 4 bytes, the processor's fp32 pixel values (D values a patch: channels x temporal x patch^2).
- one block's tensors: P x (12 hv + M) x 2 bytes: the block input, the two norms' outputs, q, k, v (hv each: the
  tower has no grouped key/value heads), the attention output and the residual (8 hv in bf16), q and k again in fp32
  for the rotary embedding (2 hv x 4 bytes = 4 hv in bf16 units), and the MLP's M values (4 iv gated, 2 iv plain).
- a frozen tower (LoRA with the tower excluded, or ``freeze_vision_tower``) keeps nothing for the backward pass; its
  forward needs one block's tensors at a time. A trained tower keeps, checkpointed, each block's input (depth x P x
  hv x 2) plus one block recomputed; without checkpointing, every block's tensors.

The images: as many of the recipe's largest (``max(query_max_pixels, candidate_max_pixels) / factor^2`` tokens plus
2 markers each) as the micro-batch holds, the most its tokens allow, or ``--images N``.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from ragym.rl.budget.model_size import ModelShape
from ragym.rl.errors import UsageError
from ragym.rl.recipe.images import recipe_images

MARKERS = 2
"""``<|vision_start|>`` and ``<|vision_end|>`` around each image's tokens."""


@dataclass(frozen=True)
class MicroBatchImages:
    """The images one micro-batch holds at the recipe's image budget."""

    num_images: int
    """Images in the micro-batch."""
    tokens_per_image: int
    """Visual tokens of each (the recipe's largest budget), markers not included."""
    source: str
    """Where the count comes from, for the report."""

    @property
    def visual_tokens(self) -> int:
        """Visual tokens in the micro-batch."""
        return self.num_images * self.tokens_per_image


def micro_batch_images(config: DictConfig, tokens: int, num_images: int | None = None) -> MicroBatchImages:
    """The images of a ``tokens``-token micro-batch: ``num_images`` of the recipe's largest budget, or as many as
    fit. A recipe without ``ragym.images`` shows none.

    >>> from omegaconf import OmegaConf
    >>> images = {"factor": 28, "query_max_pixels": 802816, "candidate_max_pixels": 200704, "min_pixels": 3136,
    ...           "cache_bytes": 0}
    >>> config = OmegaConf.create({"ragym": {"images": images}, "data": {"mm_processor_kwargs": {
    ...     "min_pixels": 3136, "max_pixels": 802816}}})
    >>> batch = micro_batch_images(config, 16384)
    >>> (batch.num_images, batch.tokens_per_image, batch.visual_tokens)
    (15, 1024, 15360)
    """
    images = recipe_images(config)
    if images is None:
        return MicroBatchImages(0, 0, "the recipe sets no ragym.images")
    budget = images.budget
    per_image = max(budget.query_max_pixels, budget.candidate_max_pixels) // budget.image_factor**2
    most = tokens // (per_image + MARKERS)
    if num_images is None:
        return MicroBatchImages(most, per_image, f"as many of the largest budget as {tokens:,} tokens hold")
    if not 0 <= num_images <= most:
        raise UsageError(
            f"--images {num_images}: a micro-batch of {tokens:,} tokens holds 0 to {most} images "
            f"of {per_image:,} tokens"
        )
    return MicroBatchImages(num_images, per_image, "--images")


@dataclass(frozen=True)
class VisionMemory:
    """The vision tower's bytes on one GPU during the update."""

    inputs: float
    """The pixel values: P x D x 4."""
    activations: float
    """What the tower keeps or needs at once (the module docstring's rule for a frozen or trained tower)."""


def block_bytes(shape: ModelShape, patches: int) -> int:
    """One vision block's tensors over ``patches`` patches: P x (12 hv + M) x 2 bytes."""
    return patches * (12 * shape.vision_hidden_size + shape.vision_mlp_values) * 2


def vision_memory(
    shape: ModelShape, images: MicroBatchImages, trained: bool, checkpointing: bool
) -> VisionMemory:
    """The tower's inputs and activations for ``images``, ``trained`` or frozen."""
    patches = images.visual_tokens * shape.patches_per_token
    block = block_bytes(shape, patches)
    if not trained:
        kept = block
    elif checkpointing:
        kept = shape.vision_depth * patches * shape.vision_hidden_size * 2 + block
    else:
        kept = shape.vision_depth * block
    return VisionMemory(inputs=patches * shape.patch_values * 4, activations=kept)
