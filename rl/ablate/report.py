"""``DIR/report.md`` of an ablation grid: the table (mean ± std, per-seed values), directions, claims, a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragym.rl.ablate.grids import Grid, row_label
from ragym.rl.ablate.speed import plot_curves, speed_lines
from ragym.rl.ablate.stats import WARM_STARTS


def _cell(stats: dict[str, Any], base: str) -> str:
    text = f"{stats['mean']:.3f} ± {stats['std']:.3f}"
    flag = stats.get(f"vs_{base}")
    return f"{text} ({flag})" if flag == "seeds disagree" else text


def table(grid: Grid, results: dict[str, Any]) -> list[str]:
    """The markdown table: one row per variant, mean ± std per metric (``seeds disagree`` flagged)."""
    base = grid.variants[0].name
    lines = ["| variant | table row | " + " | ".join(grid.metrics) + " | wall time |",
             "|---" * (len(grid.metrics) + 3) + "|"]  # fmt: skip
    for variant in grid.variants:
        stats = results["variants"][variant.name]
        cells = [_cell(stats[m], base) for m in grid.metrics]
        wall = results.get("wall_time_s", {}).get(variant.name, 0.0)
        lines.append(f"| {variant.name} | {row_label(variant)} | " + " | ".join(cells) + f" | {wall:.0f} s |")
    return lines


def movement_lines(grid: Grid, moved: dict[str, Any], seeds: list[int]) -> list[str]:
    """How far GRPO moved each variant's greedy policy (after - before per seed), and the grid's verdict."""
    shown = [m for m in ("ident_acc", "rejections", "needless_rejections", "outcome", "verification", "format")
             if m in grid.metrics]  # fmt: skip
    lines = ["", "## How far GRPO moved the greedy policy", "",
             f"After minus before GRPO on the held-out rows, per seed ({', '.join(map(str, seeds))}). The "
             "evaluation is greedy and deterministic, so a variant whose metrics did not change on a seed "
             "ended that seed where its warm start put it.", "",
             "| variant | " + " | ".join(f"Δ {m} per seed" for m in shown) + " | moved on |",
             "|---" * (len(shown) + 2) + "|"]  # fmt: skip
    for variant in grid.variants:
        info = moved["variants"][variant.name]
        deltas = [" / ".join(f"{d:+.3f}" for d in info["after_minus_before"][m]) for m in shown]
        lines.append(f"| {variant.name} | " + " | ".join(deltas) + f" | {info['moved']} |")
    still = [v.name for v in grid.variants if moved["variants"][v.name]["moved"] == "no seed"]
    if moved["verdict"] == WARM_STARTS:
        lines += ["", f"**This grid {WARM_STARTS}**: GRPO moved no variant's greedy policy on any seed, so its "
                  "table compares warm starts and is no measurement of the paper's RL claims."]  # fmt: skip
    elif still:
        lines += ["", f"Not moved by GRPO on any seed (their rows measure their warm starts, not RL): "
                  f"{', '.join(still)}."]  # fmt: skip
    return lines


def plot(grid: Grid, results: dict[str, Any], path: Path, metrics: tuple[str, ...]) -> None:
    """One panel per metric: each variant's per-seed values (dots) and mean (bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v.name for v in grid.variants]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.0), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        stats = [results["variants"][n][metric] for n in names]
        ax.bar(range(len(names)), [s["mean"] for s in stats], color="#9ecae1")
        for i, s in enumerate(stats):
            ax.scatter([i] * len(s["per_seed"]), s["per_seed"], color="#08519c", s=12, zorder=3)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(metric, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(out: Path, grid: Grid, results: dict[str, Any]) -> Path:
    """Write ``out/report.md`` and ``out/ablation.png``; returns the report's path."""
    shown = grid.metrics[:4]
    plot(grid, results, out / "ablation.png", shown)
    seeds = results["seeds"]
    lines = [f"# ragym ablate {grid.name}", "", f"{grid.paper}. Seeds {seeds}; mean ± sample std over seeds "
             f"(per-seed values in results.json). A cell marked 'seeds disagree' differs from the baseline "
             f"`{grid.variants[0].name}` in opposite directions on different seeds.", ""]  # fmt: skip
    if "base_settings" in results:
        lines += [f"Demo task: `{results.get('task', 'verify')}`. Base settings (the first variant's; the table "
                  "varies one of them):", "", "| setting | this grid | the paper's |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {name} | {v['ragym']} | {v['paper']} |" for name, v in results["base_settings"].items()]
        lines.append("")
    lines += table(grid, results)
    if "before_grpo" in results:
        base = grid.variants[0].name
        lines += ["", "Before GRPO (the warm-started policy each variant's GRPO started from, same held-out rows):", "",
                  "| variant | " + " | ".join(grid.metrics) + " |", "|---" * (len(grid.metrics) + 1) + "|"]  # fmt: skip
        for variant in grid.variants:
            stats = results["before_grpo"][variant.name]
            lines.append(
                f"| {variant.name} | " + " | ".join(_cell(stats[m], base) for m in grid.metrics) + " |"
            )
    if "grpo_movement" in results:
        lines += movement_lines(grid, results["grpo_movement"], seeds)
    if "steps_to_target" in results:
        plot_curves(grid, results, out / "curve.png")
        lines += speed_lines(grid, results)
    if results["claims"]:
        rl = "grpo_movement" in results
        lines += ["", "## The paper's directions, seed by seed", "",
                  "| claim | source | per seed | verdict |" + (" seeds GRPO moved | verdict on them |" if rl else ""),
                  "|---|---|---|---|" + ("---|---|" if rl else "")]  # fmt: skip
        for c in results["claims"]:
            held = " ".join("yes" if h else "no" for h in c["held_per_seed"])
            tail = f" {', '.join(map(str, c['rl_seeds'])) or 'none'} | {c['rl_verdict']} |" if rl else ""
            lines.append(f"| {c['claim']} | {c['source']} | {held} | {c['verdict']} |{tail}")
    lines += ["", f"![per-seed values and means of {', '.join(shown)}](ablation.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
