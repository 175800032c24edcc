"""The ``memora_r`` grid: MEMORA's Table 4 (``ragym.rl.retriever.ablation``) over seeds, in ``ragym ablate``.

Each variant is one of the ablation's cumulative rows, trained and evaluated as ``ragym retriever-demo``
does (the shared Skeptics pairs, offline annotations, all-MiniLM-L6-v2, ``memora_r_cpu``); the seed is
the trainer's and the query augmentation's seed. ``--steps`` is the optimiser steps per trained row
(default 12, the retriever demo's).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ragym.rl.ablate.grids import Claim, Grid, Variant, register_grid, run_dir

RECIPE = "memora_r_cpu"
"""The retriever demo's recipe."""
DEFAULT_STEPS = 12
"""Optimiser steps per trained row (the retriever demo's ``--max-steps``)."""
T4 = "MEMORA Table 4 (MEMORA-R training ablation)"
ROWS = ("zero-shot", "+ contrastive FT", "+ hard negatives", "+ reasoning-trace augmentation")
"""``ragym.rl.retriever.ablation`` row names, in order (checked against it at run time)."""
TABLE_ROWS = {
    "zero-shot": "zero-shot (the table's Qwen-Embedding baseline)",
    "+ contrastive FT": "+ contrastive fine-tuning on Stack Exchange pairs",
    "+ hard negatives": "+ hard negative mining",
    "+ reasoning-trace augmentation": "+ reasoning trace augmentation (full MEMORA-R)",
}
"""Each variant's row of MEMORA's Table 4, as the paper's text names them (section 5.2; the table itself is lost).
All four are the table's own rows, each adding one ingredient to the one before; ragym adds none."""


def _data(grid_dir: Path) -> Path:
    """The prepared Skeptics pairs, shared by every variant and seed (prepared once)."""
    from ragym.data_prep.annotators import OfflineAnnotator
    from ragym.data_prep.stackexchange import PrepConfig, prepare
    from ragym.rl.retriever.args import SKEPTICS_JSONL

    data_dir = grid_dir / "data"
    if not (data_dir / "report.json").is_file():
        prepare(SKEPTICS_JSONL, data_dir, OfflineAnnotator(), PrepConfig(num_negatives=1))
    return data_dir


def run_memora_r(
    grid_dir: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]
) -> dict[str, Any]:
    """Train (unless zero-shot) and evaluate one Table 4 row with ``seed``; nDCG@10 and recalls."""
    from ragym.rl.retriever.ablation import table4_rows
    from ragym.rl.retriever.config import load_retriever_recipe, with_overrides
    from ragym.rl.retriever.data import heldout_eval_set
    from ragym.rl.retriever.evaluate import EvalConfig, evaluate_encoder
    from ragym.rl.retriever.train import load_encoder, train_retriever

    if extra:
        raise ValueError(f"the memora_r grid takes no recipe overrides, got {extra}")
    start = time.perf_counter()
    data_dir = _data(grid_dir)
    out = run_dir(grid_dir, variant, seed) / "train"
    base = load_retriever_recipe(RECIPE)
    recipe = with_overrides(
        base,
        data={"data_dir": str(data_dir)},
        augment={"seed": seed},
        train={"output_dir": str(out), "max_steps": steps or DEFAULT_STEPS, "seed": seed},
    )
    rows = {row.name: row for row in table4_rows(recipe)}
    if tuple(rows) != ROWS:
        raise RuntimeError(f"ragym.rl.retriever.ablation rows are {tuple(rows)}, this grid knows {ROWS}")
    row = rows[variant.name]
    model = load_encoder(recipe.model) if row.recipe is None else train_retriever(row.recipe)
    eval_config = EvalConfig(query_prompt=recipe.model.query_prompt)
    scores = evaluate_encoder(model, heldout_eval_set(data_dir), eval_config)
    metrics = {k: float(v) for k, v in scores.items() if k != "num_queries"}
    return {"metrics": metrics, "wall_time_s": time.perf_counter() - start}


register_grid(
    Grid(
        "memora_r",
        "memora_r",
        tuple(Variant(name, row=TABLE_ROWS[name]) for name in ROWS),
        ("ndcg@10", "recall@10", "recall@100"),
        (
            Claim("ndcg@10", ROWS[1], ">", ROWS[0], T4),
            Claim("ndcg@10", ROWS[2], ">", ROWS[1], T4),
            Claim("ndcg@10", ROWS[3], ">", ROWS[2], T4),
        ),
        T4,
        # Each run trains a retriever (4.5-9 min a row on the shared 2 cores, docs/results.md): 3 seeds, not 5.
        seeds=3,
    )
)
