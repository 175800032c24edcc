"""``ragym retriever-demo --out DIR``: MEMORA-R on CPU in minutes, from the shared Skeptics pairs.

Prepares the pairs (offline deterministic annotations, BM25 negatives, hash split), runs the Table 4
ablation with all-MiniLM-L6-v2 (zero-shot, + contrastive FT, + hard negatives, + [r; q] augmentation), and
writes ``DIR/metrics.json`` with ``before`` (zero-shot) and ``after`` (full recipe) nDCG@10 on the held-out
split plus the table. ``--export`` also writes the full model with a faiss index to ``DIR/export``.
"""

from __future__ import annotations

import json
import logging
import time

from ragym.data_prep.annotators import OfflineAnnotator
from ragym.data_prep.stackexchange import INPUT_ROWS, PrepConfig, prepare
from ragym.rl.retriever.ablation import REASONING, ZERO_SHOT, format_table, run_ablation
from ragym.rl.retriever.args import parse_retriever_demo_args
from ragym.rl.retriever.config import load_retriever_recipe, with_overrides
from ragym.rl.retriever.data import heldout_eval_set, load_corpus
from ragym.rl.retriever.evaluate import EvalConfig
from ragym.rl.retriever.export import export_retriever

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    """Prepare data, run the ablation, write metrics.json and print the table."""
    args = parse_retriever_demo_args(argv)
    if not args.input.is_file():
        raise FileNotFoundError(
            f"{args.input}: Skeptics pairs not found (pass --input with a jsonl or Posts.xml)"
        )
    started = time.perf_counter()
    data_dir = args.out / "data"
    report = prepare(args.input, data_dir, OfflineAnnotator(), PrepConfig(num_negatives=1, limit=args.limit))
    recipe = with_overrides(
        load_retriever_recipe(args.recipe),
        data={"data_dir": str(data_dir)},
        train={"output_dir": str(args.out / "train"), "max_steps": args.max_steps},
    )
    eval_config = EvalConfig(query_prompt=recipe.model.query_prompt)

    def maybe_export(row: str, model) -> None:
        if args.export and row == REASONING:
            export_retriever(model, load_corpus(data_dir), args.out / "export", recipe.model.query_prompt)

    results = run_ablation(recipe, heldout_eval_set(data_dir), eval_config, on_model=maybe_export)
    headline = f"ndcg@{eval_config.ndcg_k}"
    by_row = {r["row"]: r for r in results}
    metrics = {
        "metric": headline,
        "before": by_row[ZERO_SHOT][headline],
        "after": by_row[REASONING][headline],
        "ablation": results,
        "table": format_table(results, headline),
        "data": {**report.as_dict()["splits"][INPUT_ROWS], "splits": report.details["splits"]},
        "annotator": report.details["annotator"],
        "offline_annotations": report.details["offline_annotations"],
        "max_steps_per_row": args.max_steps,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(metrics["table"])
    print(
        f"before {headline}={metrics['before']:.4f} after {headline}={metrics['after']:.4f} ({metrics['wall_s']} s)"
    )
    return 0
