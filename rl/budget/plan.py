"""What ``ragym budget gpu-check`` runs for one recipe, as plain data: made where the recipes compose (verl's config,
omegaconf), read where only torch, transformers and peft are installed (``ragym.rl.budget.gpu_check``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckPlan:
    """One recipe's update step on one GPU and the budget's prediction of its memory."""

    recipe: str
    """The recipe's name."""
    model: str
    """The policy: a ``KNOWN_CONFIGS`` name (its config kept in ragym), or "" when ``config`` holds it."""
    config: dict[str, Any] | None
    """The policy's ``config.json`` fields when it is not a known model (a local one, a test's tiny one)."""
    sequences: int
    """Episodes in the micro-batch (the recipe's micro-batch tokens over its episode length, rounded up)."""
    sequence_tokens: int
    """Tokens of each: the micro-batch's tokens shared equally."""
    num_images: int
    """Images in the micro-batch, at the recipe's image budget (``ragym.rl.budget.vision``)."""
    tokens_per_image: int
    """Visual tokens of each image."""
    lora: dict[str, Any] | None
    """The recipe's LoRA (``rank``, ``alpha``, ``target_modules``, ``exclude_modules``), or None: full fine-tuning."""
    checkpointing: bool
    """``enable_gradient_checkpointing``."""
    freeze_vision_tower: bool
    """``freeze_vision_tower``: the tower stays frozen under full fine-tuning."""
    logprob_path: str
    """verl's log-prob path ("verl") or transformers' ``labels`` loss ("labels")."""
    attention: str
    """The recipe's attention implementation (verl's default: flash_attention_2; SDPA where flash-attn is absent)."""
    predicted_gib: float
    """``ragym budget memory``'s update phase for this step on one GPU (FSDP over one shard), GiB."""
    scale_note: str
    """How the recipe's own GPUs differ from the one-GPU check (its GPU count, and its per-GPU figure there)."""

    def model_config(self) -> Any:
        """The transformers config of ``config``."""
        from ragym.rl.budget.model_size import config_from_dict

        assert self.config is not None
        return config_from_dict(self.config)

    def describe(self) -> str:
        """One line of what the step runs."""
        how = f"LoRA rank {self.lora['rank']}" if self.lora else "full fine-tuning"
        return (
            f"{self.model or 'its config'}, {how}, {self.sequences} x {self.sequence_tokens:,} tokens, "
            f"{self.num_images} x {self.tokens_per_image:,}-token images, "
            f"{'checkpointed' if self.checkpointing else 'no checkpointing'}, {self.logprob_path} log-probs; "
            f"{self.scale_note}"
        )


def image_grid(tokens: int, merge: int) -> tuple[int, int]:
    """The (height, width) in patches of an image of ``tokens`` visual tokens, as square as the count allows.

    >>> image_grid(1024, 2), image_grid(256, 2), image_grid(6, 2)
    ((64, 64), (32, 32), (4, 6))
    """
    side = next(a for a in range(math.isqrt(tokens), 0, -1) if tokens % a == 0)
    return side * merge, tokens // side * merge
