"""Reasoning-trace augmentation at collation time: the training anchor becomes ``r + separator + q``.

Doing it in the collator (not once in the dataset) redraws the drop decision every time a row is batched,
so with ``drop_rate`` p each epoch sees a fresh mix of raw and augmented queries. The reasoning column is
consumed here and never reaches the loss, so the loss sees the usual (anchor, positive, negatives...) order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator

REASONING_COLUMN = "reasoning"
"""Dataset column holding the chain-of-thought annotation r."""
ANCHOR_COLUMN = "anchor"
"""Dataset column holding the raw question q."""


def augment_query(question: str, reasoning: str, separator: str) -> str:
    """The [r; q] training query of MEMORA-R section 3.2."""
    return f"{reasoning}{separator}{question}"


@dataclass
class ReasoningQueryCollator(SentenceTransformerDataCollator):
    """sentence-transformers' collator that first folds the reasoning column into the anchor."""

    separator: str = "\n"
    """Text between r and q."""
    drop_rate: float = 0.0
    """Probability of keeping the raw question for a sample."""
    seed: int = 0
    """Seed of the drop decisions (add the rank under DDP so ranks draw differently)."""
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.drop_rate <= 1.0:
            raise ValueError(f"drop_rate must be in [0, 1], got {self.drop_rate}")
        self._rng = random.Random(self.seed)

    def fold_reasoning(self, features: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``features`` without the reasoning column, anchors augmented unless dropped."""
        folded = []
        for row in features:
            row = dict(row)
            reasoning = row.pop(REASONING_COLUMN)
            if reasoning and self._rng.random() >= self.drop_rate:
                row[ANCHOR_COLUMN] = augment_query(row[ANCHOR_COLUMN], reasoning, self.separator)
            folded.append(row)
        return folded

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        """Fold reasoning into anchors, then tokenize as sentence-transformers does."""
        if features and REASONING_COLUMN in features[0]:
            features = self.fold_reasoning(features)
        return super().__call__(features)
