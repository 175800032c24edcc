"""The files ``ragym eval`` writes: ``metrics.json``, ``metrics.md``, ``episodes.jsonl`` (per-episode metric
inputs), ``rollouts.jsonl`` (full episodes for ``ragym score --recipe R --episodes``) and two plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ragym.envs.hooks import env_hooks, one_env_per_hooks, tables_for

COLUMNS = (
    ("accuracy", "Acc."),
    ("ident", "Ident."),
    ("retriever_r1", "R@1"),
    ("retriever_r_pool", "R@pool"),
    ("avg_rejections", "Rej./ep."),
    ("avg_turns", "Turns/ep."),
    ("format_error_rate", "Format err."),
)
"""(metric key, column title) of the markdown table, in the paper's order."""
PERCENT = {"accuracy", "ident", "retriever_r1", "retriever_r_pool", "format_error_rate"}
"""Metrics shown as percentages."""


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}" if key in PERCENT else f"{value:.2f}"


def markdown(metrics: dict[str, Any]) -> str:
    """One row per data source plus ``all``; splits and aggregation notes below the table."""
    lines = [
        f"# ragym eval: `{metrics['model']}` ({metrics['backend']} backend)",
        "",
        "| data source | episodes | " + " | ".join(t for _, t in COLUMNS) + " |",
        "|---|---:|" + "---:|" * len(COLUMNS),
    ]
    rows = {**metrics["by_source"], "all": metrics["all"]}
    for name, row in rows.items():
        cells = " | ".join(_cell(key, row[key]) for key, _ in COLUMNS)
        lines.append(f"| {name} | {row['num_episodes']} | {cells} |")
    lines += [
        "",
        "Acc.: official aggregation per source; R@pool: gold entity within K x (Rej_max + 1) "
        "candidates (the ceiling of reranking + rejection).",
        "",
    ]
    for name, row in metrics["by_source"].items():
        splits = ", ".join(
            f"{s or '(none)'} {_cell('accuracy', v)}" for s, v in row["accuracy_by_split"].items()
        )
        text = ", ".join(f"{kind} ({count})" for kind, count in row["text_retriever"].items()) or "n/a"
        lines.append(
            f"- {name}: accuracy = {row['accuracy_aggregation']}, pool = {row['pool_size']}, "
            f"text retriever = {text}; by split: {splits}"
        )
    paper = {name: row["paper"] for name, row in metrics["by_source"].items() if row.get("paper")}
    tabled = [(tables_for(name), name, columns) for name, columns in paper.items()]
    for tables in dict.fromkeys(t for t, _, _ in tabled if t is not None):
        # each env's tables under its heading (KB-VQA rows: the paper's Tables 2-4, question types beside them)
        lines += ["", f"## {tables.title}", ""]
        lines += [tables.markdown(name, columns) for t, name, columns in tabled if t == tables]
    for hooks in map(env_hooks, one_env_per_hooks("eval_markdown")):
        # each env's own figures (R3G rows: the paper's accuracy and Recall@1/3/5 per scenario)
        own = {name: row[hooks.name] for name, row in metrics["by_source"].items() if row.get(hooks.name)}
        if own:
            assert hooks.eval_markdown is not None  # one_env_per_hooks keeps the hooks that define it
            lines += ["", hooks.eval_markdown(own)]
    return "\n".join(lines) + "\n"


PLOTS = ("accuracy_ident_recall.png", "turns_rejections.png")
"""The figures ``plot`` writes (bars per source, histograms)."""


def plot(metrics: dict[str, Any], records: list[dict[str, Any]], out: Path) -> list[Path]:
    """Accuracy / Ident. / retriever ceiling per source, and the turns and rejections histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sources = list(metrics["by_source"])
    keys = ("accuracy", "ident", "retriever_r1", "retriever_r_pool")
    fig, ax = plt.subplots(figsize=(max(4, 2 * len(sources)), 3.5))
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        values = [100 * (metrics["by_source"][s][key] or 0.0) for s in sources]
        ax.bar([j + i * width for j in range(len(sources))], values, width, label=dict(COLUMNS)[key])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sources))], sources)
    ax.set_ylabel("%")
    ax.legend(fontsize="small")
    fig.tight_layout()
    bars = out / PLOTS[0]
    fig.savefig(bars, dpi=120)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, key in zip(axes, ("turns", "rejections"), strict=True):
        values = [r[key] for r in records]
        ax.hist(values, bins=range(0, max(values, default=0) + 2), align="left", rwidth=0.8)
        ax.set_title(f"{key} per episode")
    fig.tight_layout()
    hist = out / PLOTS[1]
    fig.savefig(hist, dpi=120)
    plt.close(fig)
    return [bars, hist]


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (strict JSON; a mean of nothing is None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


class ReportStream:
    """``episodes.jsonl`` and ``rollouts.jsonl`` appended batch by batch, so an interrupted evaluation keeps
    every episode it ran; ``finish`` writes ``metrics.json``, ``metrics.md`` and the plots."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.records: list[dict[str, Any]] = []
        for name in ("episodes.jsonl", "rollouts.jsonl"):
            (out / name).write_text("")
        for name in PLOTS:  # an earlier run's, which a run of no episodes would otherwise leave as if its own
            (out / name).unlink(missing_ok=True)

    def add(self, records: list[dict[str, Any]]) -> None:
        """Append the records of one batch to both jsonl files."""
        with (
            (self.out / "episodes.jsonl").open("a") as summary,
            (self.out / "rollouts.jsonl").open("a") as full,
        ):
            for record in records:
                summary.write(json.dumps({k: v for k, v in record.items() if k != "episode"}) + "\n")
                full.write(record["episode"] + "\n")
        self.records += records

    def finish(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Write the metrics (strict JSON) and plots of the records added so far; returns the metrics written."""
        metrics = finite(metrics)
        (self.out / "metrics.json").write_text(json.dumps(metrics, indent=1, allow_nan=False))
        (self.out / "metrics.md").write_text(markdown(metrics))
        if self.records:
            plot(metrics, self.records, self.out)
        return metrics


def write_report(metrics: dict[str, Any], records: list[dict[str, Any]], out: Path) -> None:
    """Write every report file into ``out`` (created if needed)."""
    stream = ReportStream(out)
    stream.add(records)
    stream.finish(metrics)
