"""Per-seed aggregation of an ablation grid, and the paper's directions checked seed by seed.

A difference between two variants is only called a direction when every seed agrees on its sign; when
seeds disagree the result says so (``"seeds disagree"``) instead of reporting the sign of the mean.

For grids that train (KB-VQA), ``movement`` says per variant and seed how far GRPO moved the greedy policy
from its warm start. The held-out evaluation is greedy and deterministic, so an unchanged metric set means
GRPO changed no measured held-out outcome: such a run measures its warm start, not RL.
"""

from __future__ import annotations

import math
from typing import Any

from ragym.rl.ablate.grids import Claim, Grid

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
    return {"claim": text, "source": claim.source, "held_per_seed": held, "verdict": verdict,
            "left": claim.left, "right": claim.right}  # fmt: skip


WARM_STARTS = "measures warm starts, not RL"
"""Verdict of a grid in which GRPO moved no variant's greedy policy on any seed."""
MOVED_TOL = 1e-9
"""A metric moved when after and before differ by more than this (greedy evaluation is deterministic)."""


def movement(grid: Grid, runs: Runs, befores: Runs, seeds: list[int]) -> dict[str, Any]:
    """Per variant: after - before GRPO per metric and seed, the seeds where any metric moved, and whether
    it moved on every seed, some or none; plus the grid's verdict (``RL``, ``partly RL``, ``WARM_STARTS``)."""
    variants: dict[str, Any] = {}
    for variant in grid.variants:
        name = variant.name
        deltas = {m: [runs[name][s][m] - befores[name][s][m] for s in seeds] for m in grid.metrics}
        moved = [any(abs(deltas[m][i]) > MOVED_TOL for m in grid.metrics) for i in range(len(seeds))]
        summary = "every seed" if all(moved) else "some seeds" if any(moved) else "no seed"
        variants[name] = {"after_minus_before": deltas, "moved_per_seed": moved, "moved": summary}
    kinds = {v["moved"] for v in variants.values()}
    verdict = WARM_STARTS if kinds == {"no seed"} else "RL" if kinds == {"every seed"} else "partly RL"
    return {"variants": variants, "verdict": verdict}


def claims_under_rl(claims: list[dict[str, Any]], moved: dict[str, Any], seeds: list[int]) -> None:
    """Add to each checked claim the seeds where GRPO moved either side (``rl_seeds``) and its verdict on
    those seeds only (``rl_verdict``; ``no RL measurement`` when neither side moved on any seed)."""
    for claim in claims:
        left, right = claim["left"], claim["right"]
        rl = [i for i in range(len(seeds))
              if moved[left]["moved_per_seed"][i] or moved[right]["moved_per_seed"][i]]  # fmt: skip
        held = [claim["held_per_seed"][i] for i in rl]
        claim["rl_seeds"] = [seeds[i] for i in rl]
        claim["rl_verdict"] = ("no RL measurement" if not held else "reproduced" if all(held)
                               else "not reproduced" if not any(held) else "seeds disagree")  # fmt: skip
