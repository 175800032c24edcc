"""Per-seed aggregation of an ablation grid, and the paper's directions judged by intervals over seeds.

Every statistic is a mean over seeds with its 95% Student-t confidence interval (``mean_interval``). A difference
between two variants is the per-seed paired difference (same seed, so a seed's shared warm start and data cancel);
a direction is called only when that difference's interval excludes zero: ``up`` / ``down`` for a variant against
the baseline, ``reproduced`` / ``reversed`` for a paper's claim, and ``tie`` when the interval holds zero (one seed
gives no interval: ``too few seeds``).

For grids that train (KB-VQA), ``movement`` says per variant and seed how far GRPO moved the greedy policy
from its warm start, and the gain (after - before) with its interval. The held-out evaluation is greedy and
deterministic, so an unchanged metric set means GRPO changed no measured held-out outcome: such a run measures
its warm start, not RL.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ragym.rl.ablate.grids import Claim, Grid

Runs = dict[str, dict[int, dict[str, float]]]
"""variant -> seed -> metric -> value (the finished runs)."""
LEVEL = 0.95
"""Confidence level of every interval a grid reports."""
TOO_FEW = "too few seeds"
"""Direction or verdict of a difference measured on one seed (no interval)."""
NO_RL = "no RL measurement"
"""Verdict under RL of a claim neither of whose variants GRPO moved on any seed."""


def t_quantile(level: float, df: int) -> float:
    """The two-sided Student-t quantile of ``level`` at ``df`` degrees of freedom.

    >>> round(t_quantile(0.95, 2), 4), round(t_quantile(0.95, 4), 4), round(t_quantile(0.95, 1000), 2)
    (4.3027, 2.7764, 1.96)
    """
    from scipy.special import stdtrit  # imported here: scipy.special takes a second to load

    return float(stdtrit(df, (1 + level) / 2))


def mean_interval(values: Sequence[float], level: float = LEVEL) -> dict[str, Any]:
    """Mean over seeds, sample std, and the Student-t confidence interval of the mean (``half_width``, ``low``,
    ``high``), with ``n`` and the per-seed values. One seed has no interval: those three are None.

    Seeds 0.7, 0.5, 0.9: std 0.2, half-width t(0.975, 2) * 0.2 / sqrt(3) = 4.303 * 0.1155 = 0.497.

    >>> stats = mean_interval([0.7, 0.5, 0.9])
    >>> [round(stats[k], 3) for k in ("mean", "std", "half_width", "low", "high")], stats["n"]
    ([0.7, 0.2, 0.497, 0.203, 1.197], 3)
    >>> mean_interval([0.5])
    {'mean': 0.5, 'std': 0.0, 'n': 1, 'level': 0.95, 'half_width': None, 'low': None, 'high': None, 'per_seed': [0.5]}
    """
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval of no values")
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    half = t_quantile(level, n - 1) * std / math.sqrt(n) if n > 1 else None
    low, high = (mean - half, mean + half) if half is not None else (None, None)
    return {
        "mean": mean,
        "std": std,
        "n": n,
        "level": level,
        "half_width": half,
        "low": low,
        "high": high,
        "per_seed": list(values),
    }


def side_of_zero(interval: dict[str, Any]) -> int | None:
    """1 when ``interval`` lies above zero, -1 below, 0 when it holds zero; None when it has none (one seed).

    >>> side_of_zero(mean_interval([0.2, 0.25, 0.3])), side_of_zero(mean_interval([0.1, 0.2, 0.3]))
    (1, 0)
    """
    if interval["low"] is None:
        return None
    return 1 if interval["low"] > 0 else -1 if interval["high"] < 0 else 0


def interval_direction(diffs: Sequence[float]) -> str:
    """``up`` / ``down`` when the interval of the per-seed differences lies above / below zero, ``tie`` when it
    holds zero, ``TOO_FEW`` for one seed.

    Three seeds all above zero whose interval still holds zero are a tie, not a direction:

    >>> interval_direction([0.3, 0.2, 0.25]), interval_direction([0.01, 0.3, 0.02]), interval_direction([-0.1])
    ('up', 'tie', 'too few seeds')
    """
    return {1: "up", -1: "down", 0: "tie", None: TOO_FEW}[side_of_zero(mean_interval(diffs))]


def direction(diffs: Sequence[float]) -> str:
    """``up`` / ``down`` / ``same`` when every seed's difference agrees, else ``seeds disagree``: for ordinal
    comparisons that have no mean (``ragym.rl.ablate.speed``: steps to a target, where "not reached" is no number).

    >>> direction([0.1, 0.2]), direction([-0.1, 0.0]), direction([0.0, 0.0]), direction([0.1, -0.1])
    ('up', 'seeds disagree', 'same', 'seeds disagree')
    """
    signs = {(d > 0) - (d < 0) for d in diffs}
    if len(signs) != 1:
        return "seeds disagree"
    return {1: "up", -1: "down", 0: "same"}[signs.pop()]


def aggregate(grid: Grid, runs: Runs, seeds: list[int]) -> dict[str, Any]:
    """results.json: per variant and metric ``mean_interval`` over seeds, plus against the grid's first variant
    the paired per-seed difference (``vs_<baseline>_difference``) and its direction (``vs_<baseline>``)."""
    base = grid.variants[0].name
    variants: dict[str, Any] = {}
    for variant in grid.variants:
        per_metric: dict[str, Any] = {}
        for metric in grid.metrics:
            values = [runs[variant.name][s][metric] for s in seeds]
            per_metric[metric] = mean_interval(values)
            if variant.name != base:
                diffs = [v - runs[base][s][metric] for v, s in zip(values, seeds, strict=True)]
                per_metric[metric][f"vs_{base}"] = interval_direction(diffs)
                per_metric[metric][f"vs_{base}_difference"] = mean_interval(diffs)
        variants[variant.name] = per_metric
    claims = [check_claim(c, runs, seeds) for c in grid.claims]
    return {"grid": grid.name, "seeds": seeds, "level": LEVEL, "variants": variants, "claims": claims}


def by_step(
    curves: dict[str, dict[int, list[dict[str, float]]]], seeds: list[int], base: str
) -> dict[str, Any]:
    """Per step every run logged: each variant's mean and interval of each value over seeds, and each other
    variant's paired difference from ``base`` (the retriever's held-out recall of ``ragym ablate cotrain``).

    >>> curves = {"a": {0: [{"step": 4, "r": 0.5}], 1: [{"step": 4, "r": 0.5}]},
    ...           "b": {0: [{"step": 4, "r": 0.6}], 1: [{"step": 4, "r": 0.8}]}}
    >>> found = by_step(curves, [0, 1], "a")
    >>> found["steps"], round(found["variants"]["b"]["r"][0]["mean"], 3)
    ([4], 0.7)
    >>> [round(d, 3) for d in found["differences"]["b"]["r"][0]["per_seed"]]
    [0.1, 0.3]
    """
    rows = {name: {s: {r["step"]: r for r in curves[name][s]} for s in seeds} for name in curves}
    steps = sorted(set.intersection(*(set(r) for by_seed in rows.values() for r in by_seed.values())))
    metrics = sorted(
        {k for by_seed in rows.values() for r in by_seed.values() for v in r.values() for k in v} - {"step"}
    )
    variants: dict[str, Any] = {}
    differences: dict[str, Any] = {}
    for name, by_seed in rows.items():
        variants[name] = {
            m: [mean_interval([by_seed[s][t][m] for s in seeds]) for t in steps] for m in metrics
        }
        if name != base:
            differences[name] = {
                m: [mean_interval([by_seed[s][t][m] - rows[base][s][t][m] for s in seeds]) for t in steps]
                for m in metrics
            }
    return {"steps": steps, "variants": variants, "differences": differences}


def claim_verdict(difference: dict[str, Any], op: str) -> str:
    """``reproduced`` when the interval of left - right lies on ``op``'s side of zero, ``reversed`` when on the
    other, ``tie`` when it holds zero, ``TOO_FEW`` without an interval.

    >>> claim_verdict(mean_interval([0.2, 0.25, 0.3]), ">"), claim_verdict(mean_interval([0.2, 0.25, 0.3]), "<")
    ('reproduced', 'reversed')
    """
    side = side_of_zero(difference)
    if side is None:
        return TOO_FEW
    return {1: "reproduced", -1: "reversed", 0: "tie"}[side * (1 if op == ">" else -1)]


def check_claim(claim: Claim, runs: Runs, seeds: list[int]) -> dict[str, Any]:
    """The claim's paired difference (left - right per seed) with its interval and verdict; ``held_per_seed``
    says on which seeds it held (information: the verdict is the interval's)."""
    diffs = [runs[claim.left][s][claim.metric] - runs[claim.right][s][claim.metric] for s in seeds]
    sign = 1 if claim.op == ">" else -1
    difference = mean_interval(diffs)
    return {
        "claim": f"{claim.metric}: {claim.left} {claim.op} {claim.right}",
        "source": claim.source,
        "left": claim.left,
        "op": claim.op,
        "right": claim.right,
        "difference": difference,
        "held_per_seed": [sign * d > 0 for d in diffs],
        "verdict": claim_verdict(difference, claim.op),
    }


WARM_STARTS = "measures warm starts, not RL"
"""Verdict of a grid in which GRPO moved no variant's greedy policy on any seed."""
MOVED_TOL = 1e-9
"""A metric moved when after and before differ by more than this (greedy evaluation is deterministic)."""


def movement(grid: Grid, runs: Runs, befores: Runs, seeds: list[int]) -> dict[str, Any]:
    """Per variant: after - before GRPO per metric and seed, the gain's ``mean_interval`` per metric, the seeds
    where any metric moved, and whether it moved on every seed, some or none; plus the grid's verdict (``RL``,
    ``partly RL``, ``WARM_STARTS``)."""
    variants: dict[str, Any] = {}
    for variant in grid.variants:
        name = variant.name
        deltas = {m: [runs[name][s][m] - befores[name][s][m] for s in seeds] for m in grid.metrics}
        moved = [any(abs(deltas[m][i]) > MOVED_TOL for m in grid.metrics) for i in range(len(seeds))]
        summary = "every seed" if all(moved) else "some seeds" if any(moved) else "no seed"
        variants[name] = {
            "after_minus_before": deltas,
            "gain": {m: mean_interval(d) for m, d in deltas.items()},
            "moved_per_seed": moved,
            "moved": summary,
        }
    kinds = {v["moved"] for v in variants.values()}
    verdict = WARM_STARTS if kinds == {"no seed"} else "RL" if kinds == {"every seed"} else "partly RL"
    return {"variants": variants, "verdict": verdict}


def claims_under_rl(claims: list[dict[str, Any]], moved: dict[str, Any], seeds: list[int]) -> None:
    """Add to each checked claim the seeds where GRPO moved either side (``rl_seeds``), the paired difference on
    those seeds only (``rl_difference``) and its verdict by the same rule (``rl_verdict``; ``NO_RL`` when neither
    side moved on any seed)."""
    for claim in claims:
        left, right = claim["left"], claim["right"]
        rl = [
            i
            for i in range(len(seeds))
            if moved[left]["moved_per_seed"][i] or moved[right]["moved_per_seed"][i]
        ]
        diffs = [claim["difference"]["per_seed"][i] for i in rl]
        claim["rl_seeds"] = [seeds[i] for i in rl]
        difference = mean_interval(diffs) if diffs else None
        claim["rl_difference"] = difference
        claim["rl_verdict"] = NO_RL if difference is None else claim_verdict(difference, claim["op"])


def interval_text(stats: dict[str, Any], signed: bool = False) -> str:
    """A statistic as the report writes it: ``mean [low, high]``, or the mean and why it has no interval.

    >>> interval_text(mean_interval([0.7, 0.5, 0.9])), interval_text(mean_interval([0.1, 0.3]), signed=True)
    ('0.700 [0.203, 1.197]', '+0.200 [-1.071, +1.471]')
    >>> interval_text(mean_interval([0.5]))
    '0.500 (1 seed: no interval)'
    """
    form = "{:+.3f}" if signed else "{:.3f}"
    if stats["low"] is None:
        return form.format(stats["mean"]) + " (1 seed: no interval)"
    return f"{form.format(stats['mean'])} [{form.format(stats['low'])}, {form.format(stats['high'])}]"
