"""Per-seed aggregation of an ablation grid, and the paper's directions checked seed by seed.

A difference between two variants is only called a direction when every seed agrees on its sign; when
seeds disagree the result says so (``"seeds disagree"``) instead of reporting the sign of the mean.
"""

from __future__ import annotations

import math
from typing import Any

from rl.ablate.grids import Claim, Grid

Runs = dict[str, dict[int, dict[str, float]]]
"""variant -> seed -> metric -> value (the finished runs)."""


def summarize(values: list[float]) -> dict[str, Any]:
    """Mean, sample std (0 for one seed) and the per-seed values.

    >>> summarize([1.0, 3.0])
    {'mean': 2.0, 'std': 1.4142135623730951, 'per_seed': [1.0, 3.0]}
    """
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {"mean": mean, "std": math.sqrt(var), "per_seed": list(values)}


def direction(diffs: list[float]) -> str:
    """``up`` / ``down`` / ``same`` when every seed's difference agrees, else ``seeds disagree``.

    >>> direction([0.1, 0.2]), direction([-0.1, 0.0]), direction([0.0, 0.0]), direction([0.1, -0.1])
    ('up', 'seeds disagree', 'same', 'seeds disagree')
    """
    signs = {(d > 0) - (d < 0) for d in diffs}
    if len(signs) != 1:
        return "seeds disagree"
    return {1: "up", -1: "down", 0: "same"}[signs.pop()]


def aggregate(grid: Grid, runs: Runs, seeds: list[int]) -> dict[str, Any]:
    """results.json: per variant and metric the mean, std and per-seed values, plus ``vs_<baseline>``, the
    per-seed direction of the variant's difference from the grid's first variant."""
    base = grid.variants[0].name
    variants: dict[str, Any] = {}
    for variant in grid.variants:
        per_metric: dict[str, Any] = {}
        for metric in grid.metrics:
            values = [runs[variant.name][s][metric] for s in seeds]
            per_metric[metric] = summarize(values)
            if variant.name != base:
                diffs = [v - runs[base][s][metric] for v, s in zip(values, seeds, strict=True)]
                per_metric[metric][f"vs_{base}"] = direction(diffs)
        variants[variant.name] = per_metric
    claims = [check_claim(c, runs, seeds) for c in grid.claims]
    return {"grid": grid.name, "seeds": seeds, "variants": variants, "claims": claims}


def check_claim(claim: Claim, runs: Runs, seeds: list[int]) -> dict[str, Any]:
    """Whether ``claim`` held on every seed (``reproduced``), on none (``not reproduced``), or on some."""
    sign = 1 if claim.op == ">" else -1
    held = [
        sign * (runs[claim.left][s][claim.metric] - runs[claim.right][s][claim.metric]) > 0 for s in seeds
    ]
    verdict = "reproduced" if all(held) else "not reproduced" if not any(held) else "seeds disagree"
    text = f"{claim.metric}: {claim.left} {claim.op} {claim.right}"
    return {"claim": text, "source": claim.source, "held_per_seed": held, "verdict": verdict}
