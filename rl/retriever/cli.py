"""``ragym train-retriever --recipe R [section.key=value ...]``: train MEMORA-R, evaluate it, export model + faiss index.

Single process on CPU or one GPU; multi-GPU through the launcher, which the Hugging Face trainer detects:
    torchrun --nproc_per_node 4 -m ragym.rl.retriever.cli --recipe memora_r_qwen3_embedding
Writes ``<output_dir>/model`` (sentence-transformers), ``<output_dir>/export`` (model + faiss index, see
``ragym.rl.retriever.export``) and ``<output_dir>/metrics.json`` (held-out and optional BRIGHT nDCG@10/Recall@k).
``--ablation`` runs the paper's Table 4 rows instead and prints the table.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ragym.rl.errors import UsageError
from ragym.rl.recipe.overrides import parse_overrides
from ragym.rl.retriever.ablation import format_table, run_ablation
from ragym.rl.retriever.args import parse_train_retriever_args
from ragym.rl.retriever.config import RetrieverRecipe, load_retriever_recipe, with_overrides
from ragym.rl.retriever.data import EvalSet, heldout_eval_set, load_bright, load_corpus
from ragym.rl.retriever.evaluate import EvalConfig, evaluate_encoder
from ragym.rl.retriever.export import export_retriever
from ragym.rl.retriever.train import train_retriever

logger = logging.getLogger(__name__)


def apply_overrides(recipe: RetrieverRecipe, items: list[str]) -> RetrieverRecipe:
    """Apply ``section.key=value`` overrides (values parsed as YAML, so numbers and lists work)."""
    for key, value in parse_overrides(items).items():
        section, dot, name = key.partition(".")
        if not dot:
            raise UsageError(f"override {key}=...: expected section.key=value (e.g. train.max_steps=1)")
        recipe = with_overrides(recipe, **{section: {name: value}})
    return recipe


def eval_sets(recipe: RetrieverRecipe, bright: list[str] | None) -> dict[str, EvalSet]:
    """The held-out split (when the data has one) and the BRIGHT-format task (when given), read before training so
    that a broken one is refused before the training time is spent."""
    data_dir = Path(recipe.data.data_dir)
    sets: dict[str, EvalSet] = {}
    if (data_dir / "test.jsonl").exists():
        sets["heldout"] = heldout_eval_set(data_dir)
    if bright:
        sets["bright"] = load_bright(*map(Path, bright))
    return sets


def evaluate_all(model: Any, recipe: RetrieverRecipe, sets: dict[str, EvalSet]) -> dict[str, Any]:
    """Metrics of every evaluation set, by name."""
    config = EvalConfig(query_prompt=recipe.model.query_prompt)
    return {name: evaluate_encoder(model, eval_set, config) for name, eval_set in sets.items()}


def main(argv: list[str] | None = None) -> int:
    """Train (or ablate) per the recipe; print and save metrics."""
    args = parse_train_retriever_args(argv)
    recipe = apply_overrides(load_retriever_recipe(args.recipe), args.overrides)
    out = Path(recipe.train.output_dir)
    if args.ablation:
        data_dir = Path(recipe.data.data_dir)
        results = run_ablation(
            recipe, heldout_eval_set(data_dir), EvalConfig(query_prompt=recipe.model.query_prompt)
        )
        out.mkdir(parents=True, exist_ok=True)
        (out / "ablation.json").write_text(json.dumps(results, indent=2) + "\n")
        print(format_table(results))
        return 0
    sets = eval_sets(recipe, args.bright)
    model = train_retriever(recipe)
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return 0  # evaluation and export happen once, on rank 0
    metrics = evaluate_all(model, recipe, sets)
    if not args.no_export:
        corpus = load_corpus(Path(recipe.data.data_dir))
        export_retriever(model, corpus, out / "export", recipe.model.query_prompt)
        metrics["export_dir"] = str(out / "export")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main())
