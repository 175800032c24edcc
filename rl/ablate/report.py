"""``DIR/report.md`` of an ablation grid: the table (mean and 95% interval over seeds), directions against the
baseline, GRPO's gains, the paper's claims judged by their difference's interval, a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragym.rl.ablate.grids import Grid, row_label
from ragym.rl.ablate.speed import plot_curves, speed_lines
from ragym.rl.ablate.stats import WARM_STARTS, interval_text

RULE = (
    "A direction is called only where the 95% interval of the paired difference (per seed, same seed on "
    "both sides) excludes zero: a claim is `reproduced` when that interval lies wholly on the claimed side of "
    "zero, `reversed` when wholly on the other side, `tie` when it holds zero, `too few seeds` with one seed."
)
"""The report's one sentence on how directions and claims are judged (``ragym.rl.ablate.stats``)."""


def _cell(stats: dict[str, Any], base: str) -> str:
    flag = stats.get(f"vs_{base}")
    return interval_text(stats) + (f" ({flag})" if flag in ("up", "down") else "")


def table(grid: Grid, results: dict[str, Any]) -> list[str]:
    """The markdown table: one row per variant, mean [95% interval] per metric, ``(up)`` / ``(down)`` where the
    paired difference from the baseline has an interval above / below zero."""
    base = grid.variants[0].name
    lines = [
        "| variant | table row | " + " | ".join(grid.metrics) + " | wall time |",
        "|---" * (len(grid.metrics) + 3) + "|",
    ]
    for variant in grid.variants:
        stats = results["variants"][variant.name]
        cells = [_cell(stats[m], base) for m in grid.metrics]
        wall = results.get("wall_time_s", {}).get(variant.name, 0.0)
        lines.append(f"| {variant.name} | {row_label(variant)} | " + " | ".join(cells) + f" | {wall:.0f} s |")
    return lines


def movement_lines(grid: Grid, moved: dict[str, Any], seeds: list[int]) -> list[str]:
    """How far GRPO moved each variant's greedy policy (after - before per seed), and the grid's verdict."""
    shown = [
        m
        for m in ("ident_acc", "rejections", "needless_rejections", "outcome", "verification", "format")
        if m in grid.metrics
    ]
    lines = [
        "",
        "## How far GRPO moved the greedy policy",
        "",
        f"After minus before GRPO on the held-out rows, per seed ({', '.join(map(str, seeds))}). The "
        "evaluation is greedy and deterministic, so a variant whose metrics did not change on a seed "
        "ended that seed where its warm start put it.",
        "",
        "| variant | " + " | ".join(f"Δ {m} per seed" for m in shown) + " | moved on |",
        "|---" * (len(shown) + 2) + "|",
    ]
    for variant in grid.variants:
        info = moved["variants"][variant.name]
        deltas = [" / ".join(f"{d:+.3f}" for d in info["after_minus_before"][m]) for m in shown]
        lines.append(f"| {variant.name} | " + " | ".join(deltas) + f" | {info['moved']} |")
    lines += [
        "",
        "Gain (after - before GRPO) per metric: mean over seeds [95% interval].",
        "",
        "| variant | " + " | ".join(f"gain in {m}" for m in grid.metrics) + " |",
        "|---" * (len(grid.metrics) + 1) + "|",
    ]
    for variant in grid.variants:
        gains = moved["variants"][variant.name]["gain"]
        lines.append(
            f"| {variant.name} | "
            + " | ".join(interval_text(gains[m], signed=True) for m in grid.metrics)
            + " |"
        )
    still = [v.name for v in grid.variants if moved["variants"][v.name]["moved"] == "no seed"]
    if moved["verdict"] == WARM_STARTS:
        lines += [
            "",
            f"**This grid {WARM_STARTS}**: GRPO moved no variant's greedy policy on any seed, so its "
            "table compares warm starts and is no measurement of the paper's RL claims.",
        ]
    elif still:
        lines += [
            "",
            f"Not moved by GRPO on any seed (their rows measure their warm starts, not RL): "
            f"{', '.join(still)}.",
        ]
    return lines


def claim_lines(claims: list[dict[str, Any]], rl: bool) -> list[str]:
    """The paper's directions: each claim's per-seed difference (left - right), its mean [95% interval] and
    verdict; with ``rl``, the same on the seeds where GRPO moved either side."""
    lines = [
        "",
        "## The paper's directions",
        "",
        RULE,
        "",
        "| claim | source | left - right per seed | mean [95% interval] | verdict |"
        + (" seeds GRPO moved | mean [95% interval] on them | verdict on them |" if rl else ""),
        "|---|---|---|---|---|" + ("---|---|---|" if rl else ""),
    ]
    for c in claims:
        diff = c["difference"]
        per_seed = " / ".join(f"{d:+.3f}" for d in diff["per_seed"])
        tail = ""
        if rl:
            moved = c["rl_difference"]
            tail = (
                f" {', '.join(map(str, c['rl_seeds'])) or 'none'} | "
                f"{'-' if moved is None else interval_text(moved, signed=True)} | {c['rl_verdict']} |"
            )
        lines.append(
            f"| {c['claim']} | {c['source']} | {per_seed} | {interval_text(diff, signed=True)} | "
            f"{c['verdict']} |{tail}"
        )
    return lines


def plot(grid: Grid, results: dict[str, Any], path: Path, metrics: tuple[str, ...]) -> None:
    """One panel per metric: each variant's per-seed values (dots), mean (bar) and its 95% interval (whisker)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v.name for v in grid.variants]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.0), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        stats = [results["variants"][n][metric] for n in names]
        # The bar is the mean, the whisker its 95% interval (none for one seed), the dots the seeds.
        ax.bar(
            range(len(names)),
            [s["mean"] for s in stats],
            color="#9ecae1",
            yerr=[s["half_width"] or 0.0 for s in stats],
            capsize=3,
            ecolor="#636363",
        )
        for i, s in enumerate(stats):
            ax.scatter([i] * len(s["per_seed"]), s["per_seed"], color="#08519c", s=12, zorder=3)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(metric, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def retriever_lines(found: dict[str, Any], base: str) -> list[str]:
    """The held-out retriever recall each run logged, by step: each variant's mean [95% interval] over seeds, and
    each other variant's paired difference from the baseline."""
    metrics = sorted(found["variants"][base])
    others = [name for name in found["variants"] if name != base]
    heads = [f"{name} {m}" for m in metrics for name in found["variants"]]
    heads += [f"{name} - {base} {m}" for m in metrics for name in others]
    lines = ["", "## Retriever recall by step (held-out images)", "", "| step | " + " | ".join(heads) + " |"]
    lines.append("|---" * (len(heads) + 1) + "|")
    for i, step in enumerate(found["steps"]):
        cells = [interval_text(found["variants"][n][m][i]) for m in metrics for n in found["variants"]]
        cells += [interval_text(found["differences"][n][m][i], signed=True) for m in metrics for n in others]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def failed_lines(results: dict[str, Any]) -> list[str]:
    """The seeds left out of the table because a variant's warm start missed its target, each with its reason."""
    failed = results.get("failed_warm_starts", [])
    if not failed:
        return []
    gone = sorted({f["seed"] for f in failed})
    lines = [
        f"**{len(failed)} warm start(s) missed their target**, so seed(s) {', '.join(map(str, gone))} of "
        f"{results['seeds_asked']} left this table for every variant (a failed warm start is a bug to fix, "
        "not a row to average; the differences stay paired):",
        "",
    ]
    lines += [f"- {f['variant']} seed {f['seed']}: {f['reason']}" for f in failed]
    return lines + [""]


def write_report(out: Path, grid: Grid, results: dict[str, Any]) -> Path:
    """Write ``out/report.md`` and ``out/ablation.png``; returns the report's path."""
    shown = grid.metrics[:4]
    plot(grid, results, out / "ablation.png", shown)
    seeds = results["seeds"]
    against = (
        f" A cell marked (up) or (down) differs from the baseline `{grid.variants[0].name}` by a paired "
        "per-seed difference whose interval lies above or below zero."
        if len(results["variants"]) > 1
        else ""
    )
    lines = [
        f"# ragym ablate {grid.name}",
        "",
        f"{grid.paper}. Seeds {seeds}; each cell is the mean over seeds "
        f"[its 95% Student-t confidence interval] (per-seed values in results.json).{against}",
        "",
    ]
    if "base_settings" in results:
        lines += [
            f"Demo task: `{results.get('task', 'verify')}`. Base settings (the first variant's; the table "
            "varies one of them):",
            "",
            "| setting | this grid | the paper's |",
            "|---|---|---|",
        ]
        lines += [f"| {name} | {v['ragym']} | {v['paper']} |" for name, v in results["base_settings"].items()]
        lines.append("")
    lines += failed_lines(results)
    lines += table(grid, results)
    if "before_grpo" in results:
        base = grid.variants[0].name
        lines += [
            "",
            "Before GRPO (the warm-started policy each variant's GRPO started from, same held-out rows):",
            "",
            "| variant | " + " | ".join(grid.metrics) + " |",
            "|---" * (len(grid.metrics) + 1) + "|",
        ]
        for variant in grid.variants:
            stats = results["before_grpo"][variant.name]
            lines.append(
                f"| {variant.name} | " + " | ".join(_cell(stats[m], base) for m in grid.metrics) + " |"
            )
    if "grpo_movement" in results:
        lines += movement_lines(grid, results["grpo_movement"], seeds)
    if "retriever_by_step" in results:
        lines += retriever_lines(results["retriever_by_step"], grid.variants[0].name)
    if "steps_to_target" in results:
        plot_curves(grid, results, out / "curve.png")
        lines += speed_lines(grid, results)
    if results["claims"]:
        lines += claim_lines(results["claims"], "grpo_movement" in results)
    lines += ["", f"![per-seed values, means and 95% intervals of {', '.join(shown)}](ablation.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
