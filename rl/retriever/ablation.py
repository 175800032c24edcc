"""The MEMORA-R training ablation (seed 000, Table 4) on whatever prepared data a recipe points at.

Rows, each adding one ingredient on top of the previous: zero-shot backbone; + contrastive fine-tuning
(in-batch negatives, raw queries); + BM25 hard negatives; + reasoning-trace [r; q] augmentation (the full
recipe). Every trained row starts from the same backbone; delta is measured against the contrastive row,
as in the paper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentence_transformers import SentenceTransformer

from ragym.rl.retriever.config import RetrieverRecipe, with_overrides
from ragym.rl.retriever.data import EvalSet
from ragym.rl.retriever.evaluate import EvalConfig, evaluate_encoder
from ragym.rl.retriever.train import load_encoder, train_retriever

logger = logging.getLogger(__name__)

ZERO_SHOT = "zero-shot"
CONTRASTIVE = "+ contrastive FT"
HARD_NEGATIVES = "+ hard negatives"
REASONING = "+ reasoning-trace augmentation"


@dataclass(frozen=True)
class AblationRow:
    """One Table 4 row: its name and the recipe it trains (None = no training)."""

    name: str
    """Row label as printed."""
    recipe: RetrieverRecipe | None
    """Training recipe; None evaluates the untouched backbone."""


def table4_rows(recipe: RetrieverRecipe) -> list[AblationRow]:
    """The four cumulative rows derived from the full recipe (which must use negatives and reasoning)."""
    if recipe.data.num_hard_negatives < 1 or not recipe.augment.use_reasoning:
        raise ValueError(
            "the ablation needs a full recipe: data.num_hard_negatives >= 1 and augment.use_reasoning"
        )
    out = Path(recipe.train.output_dir)

    def variant(slug: str, negatives: int, reasoning: bool) -> RetrieverRecipe:
        return with_overrides(
            recipe,
            data={"num_hard_negatives": negatives},
            augment={"use_reasoning": reasoning},
            train={"output_dir": str(out / slug), "run_name": f"{recipe.train.run_name}-{slug}"},
        )

    return [
        AblationRow(ZERO_SHOT, None),
        AblationRow(CONTRASTIVE, variant("contrastive", 0, False)),
        AblationRow(HARD_NEGATIVES, variant("hard_negatives", recipe.data.num_hard_negatives, False)),
        AblationRow(REASONING, variant("reasoning", recipe.data.num_hard_negatives, True)),
    ]


def run_ablation(
    recipe: RetrieverRecipe,
    eval_set: EvalSet,
    eval_config: EvalConfig,
    on_model: Callable[[str, SentenceTransformer], None] | None = None,
) -> list[dict[str, Any]]:
    """Train and evaluate every row; ``on_model(row_name, model)`` sees each model (e.g. to export the last)."""
    results = []
    for row in table4_rows(recipe):
        logger.info("ablation row %r", row.name)
        model = load_encoder(recipe.model) if row.recipe is None else train_retriever(row.recipe)
        metrics = evaluate_encoder(model, eval_set, eval_config)
        results.append({"row": row.name, **metrics})
        logger.info("ablation row %r: %s", row.name, metrics)
        if on_model is not None:
            on_model(row.name, model)
    headline = f"ndcg@{eval_config.ndcg_k}"
    base = next(r[headline] for r in results if r["row"] == CONTRASTIVE)
    for result in results:
        result["delta_vs_contrastive"] = result[headline] - base if result["row"] != ZERO_SHOT else None
    return results


def format_table(results: list[dict[str, Any]], headline: str = "ndcg@10") -> str:
    """Markdown table in the paper's layout (scores x100, delta cumulative over contrastive FT)."""
    recall_keys = [k for k in results[0] if k.startswith("recall@")]
    header = ["Training configuration", headline, *recall_keys, "delta"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        delta = "-" if r["delta_vs_contrastive"] is None else f"{100 * r['delta_vs_contrastive']:+.1f}"
        cells = [r["row"], f"{100 * r[headline]:.1f}", *(f"{100 * r[k]:.1f}" for k in recall_keys), delta]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
