"""How fast GRPO gets there: steps to a target held-out Ident., and the groups dynamic sampling dropped.

A grid with a ``Grid.target`` evaluates the held-out rows greedily every ``Grid.eval_every`` GRPO steps
(the engine's ``trainer.test_freq``) and at the last step; step 0 is the evaluation before GRPO. A run's
``steps_to_target`` is the first evaluated step whose ``ident_acc`` reaches the target: the target was first
reached after the previous evaluation and by that step. A run that never reaches it is ``not reached``
(``None`` in results.json), which counts as later than any step when variants are compared seed by seed.

From every GRPO step's ``dynamic_sampling/*`` metrics a run also keeps the share of generated groups whose
rewards were flat and, with dynamic sampling on, the share it dropped (flat groups it refilled, not the ones
it trained on at the round bound) and the generation rounds a step took.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragym.rl.ablate.grids import Grid
from ragym.rl.ablate.stats import direction, mean_interval

FLAT = "dynamic_sampling/flat_group_share"
DROPPED = "dynamic_sampling/dropped_groups"
TOPPED_UP = "dynamic_sampling/topped_up_groups"
ROUNDS = "dynamic_sampling/gen_batches"
REACH_TOL = 1e-9
"""``ident_acc`` is a share of held-out rows: 38/48 = 0.7917 reaches a target of 0.79."""
NOT_REACHED = "not reached"


def steps_to_target(curve: Sequence[tuple[int, float]], target: float) -> int | None:
    """The first evaluated step whose value reaches ``target``; None when none does.

    >>> steps_to_target([(0, 0.0), (10, 0.5), (20, 0.7917), (30, 0.6)], 0.79)
    20
    >>> steps_to_target([(0, 0.0), (10, 0.5)], 0.79) is None
    True
    """
    for step, value in sorted(curve):
        if value >= target - REACH_TOL:
            return step
    return None


def later(a: int | None, b: int | None) -> int:
    """1 when ``a`` reached the target after ``b``, -1 before, 0 at the same step (never counts as latest).

    >>> later(20, 10), later(None, 30), later(10, None), later(None, None)
    (1, 1, -1, 0)
    """
    if a is None or b is None:
        return (a is None) - (b is None)
    return (a > b) - (a < b)


def dropped_share(record: dict[str, float]) -> float:
    """The share of one step's generated groups that dynamic sampling dropped (refilled, not trained on).

    The engine logs the flat share of the generated groups and the flat ones dropped and topped up, so the
    generated count is (dropped + topped up) / flat share. 3 flat of 7, all dropped; 4 flat of 6, 2 of them
    trained on at the round bound:

    >>> dropped_share({FLAT: 3 / 7, DROPPED: 3.0, TOPPED_UP: 0.0}), dropped_share({FLAT: 4 / 6, DROPPED: 2.0,
    ...     TOPPED_UP: 2.0})
    (0.42857142857142855, 0.3333333333333333)
    """
    flat = record[DROPPED] + record[TOPPED_UP]
    return record[DROPPED] * record[FLAT] / flat if flat > 0 else 0.0


def held_out_evaluations(records: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, float]]]:
    """The held-out evaluations a GRPO run logged during training (``val/`` keys, prefix removed), by step;
    the last one logged for a step wins (a resumed run logs a step again)."""
    by_step = {
        r["step"]: {k[4:]: v for k, v in r.items() if k.startswith("val/")}
        for r in records
        if any(k.startswith("val/") for k in r)
    }
    return sorted(by_step.items())


def sampling_summary(records: Sequence[dict[str, Any]], enabled: bool) -> dict[str, Any]:
    """Means over a run's GRPO steps: the flat-group share (only counted when ``enabled`` is false), the
    share dynamic sampling dropped (0 when it is off) and the generation rounds per step."""
    steps = [r for r in records if FLAT in r]
    if not steps:  # a run of 0 GRPO steps
        return {
            "dynamic_sampling": enabled,
            "steps": 0,
            "flat_group_share": 0.0,
            "dropped_group_share": 0.0,
            "gen_batches": 0.0,
        }
    return {
        "dynamic_sampling": enabled,
        "steps": len(steps),
        "flat_group_share": _mean([r[FLAT] for r in steps]),
        "dropped_group_share": _mean([dropped_share(r) for r in steps]) if enabled else 0.0,
        "gen_batches": _mean([r[ROUNDS] for r in steps]),
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


Curves = dict[str, dict[int, list[dict[str, float]]]]
"""variant -> seed -> held-out curve: ``{"step", "ident_acc", ...}`` points, step 0 first."""


def speed(
    grid: Grid, curves: Curves, sampling: dict[str, dict[int, dict]], seeds: list[int]
) -> dict[str, Any]:
    """results.json's ``steps_to_target`` (per variant and seed, ``vs_<baseline>`` seed by seed, the peak
    held-out ident_acc) and ``group_sampling`` (flat, dropped shares and rounds per step)."""
    if grid.target is None:
        raise ValueError(f"grid {grid.name!r} has no target")
    target = grid.target.ident_acc
    base = grid.variants[0].name
    steps = {
        v.name: [
            steps_to_target([(int(p["step"]), p["ident_acc"]) for p in curves[v.name][s]], target)
            for s in seeds
        ]
        for v in grid.variants
    }
    reach: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    for variant in grid.variants:
        name, per_seed = variant.name, steps[variant.name]
        reached = [s for s in per_seed if s is not None]
        entry = {
            "per_seed": per_seed,
            "reached_seeds": len(reached),
            "mean_over_reached": sum(reached) / len(reached) if reached else None,
            "peak_ident_acc": mean_interval([max(p["ident_acc"] for p in curves[name][s]) for s in seeds]),
            "curve_per_seed": [[[p["step"], p["ident_acc"]] for p in curves[name][s]] for s in seeds],
        }
        if name != base:
            entry[f"vs_{base}"] = direction([later(a, b) for a, b in zip(per_seed, steps[base], strict=True)])
        reach[name] = entry
        runs = [sampling[name][s] for s in seeds]
        dynamic = all(r["dynamic_sampling"] for r in runs)
        groups[name] = {
            "dynamic_sampling": dynamic,
            "flat_group_share": mean_interval([r["flat_group_share"] for r in runs]),
            "dropped_group_share": mean_interval([r["dropped_group_share"] for r in runs])
            if dynamic
            else None,
            "gen_batches": mean_interval([r["gen_batches"] for r in runs]),
        }
    return {
        "steps_to_target": {"target_ident_acc": target, "source": grid.target.source, "variants": reach},
        "group_sampling": groups,
    }


def _steps(value: int | None) -> str:
    return NOT_REACHED if value is None else str(value)


def speed_lines(grid: Grid, results: dict[str, Any]) -> list[str]:
    """The report's section: steps to the target per seed, the peak, and what dynamic sampling dropped."""
    base = grid.variants[0].name
    reach, groups = results["steps_to_target"], results["group_sampling"]
    evaluated = [step for step, _ in reach["variants"][base]["curve_per_seed"][0]]
    lines = [
        "",
        f"## Steps to the target: held-out ident_acc >= {reach['target_ident_acc']}",
        "",
        f"The target is {reach['source']}. Held-out greedy evaluation at "
        f"steps {', '.join(map(str, evaluated))} (step 0: the policy GRPO started from); a step below is the "
        f"first evaluation at or above the target, so the target was first reached after the evaluation "
        f"before it. '{NOT_REACHED}': no evaluation of the run reached it. `vs {base}` compares seed by seed "
        f"(up: later, down: earlier; '{NOT_REACHED}' is later than any step).",
        "",
        f"| variant | steps to target per seed | reached on | vs {base} | peak held-out ident_acc per seed "
        "| flat groups / step | dropped groups / step (dynamic sampling) | generation rounds / step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant in grid.variants:
        entry, sampled = reach["variants"][variant.name], groups[variant.name]
        dropped = sampled["dropped_group_share"]
        cells = [
            " / ".join(_steps(s) for s in entry["per_seed"]),
            f"{entry['reached_seeds']} of {len(entry['per_seed'])} seeds",
            entry.get(f"vs_{base}", "(baseline)"),
            " / ".join(f"{v:.3f}" for v in entry["peak_ident_acc"]["per_seed"]),
            f"{sampled['flat_group_share']['mean']:.3f}"
            + ("" if sampled["dynamic_sampling"] else " (counted)"),
            "off" if dropped is None else f"{dropped['mean']:.3f} ± {dropped['std']:.3f}",
            f"{sampled['gen_batches']['mean']:.2f}",
        ]
        lines.append(f"| {variant.name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Flat groups: the share of generated groups whose episodes all scored the same (zero advantage; "
        "'counted': trained on, as dynamic sampling is off). Dropped: the share dynamic sampling refilled "
        "(flat groups trained on at the round bound are not dropped). Means over steps, then over seeds.",
        "",
        "![held-out ident_acc during GRPO, per seed, with the target](curve.png)",
    ]
    return lines


def plot_curves(grid: Grid, results: dict[str, Any], path: Path) -> None:
    """Held-out ident_acc against GRPO step, one line per (variant, seed), and the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    reach = results["steps_to_target"]
    for i, variant in enumerate(grid.variants):
        for j, curve in enumerate(reach["variants"][variant.name]["curve_per_seed"]):
            ax.plot(
                [step for step, _ in curve],
                [value for _, value in curve],
                marker="o",
                markersize=3,
                color=f"C{i}",
                alpha=0.8,
                label=variant.name if j == 0 else None,
            )
    target = reach["target_ident_acc"]
    ax.axhline(target, color="grey", linestyle="--", label=f"target {target}")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out ident_acc")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
