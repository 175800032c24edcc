"""MMAgent-R²'s headline columns from evaluated episodes: Tables 2-4 per benchmark, question types beside them.

Table 2 reports E-VQA Single-Hop (every question type but ``2_hop``) and All, and InfoSeek Unseen-Q, Unseen-E and
All (their harmonic mean); Table 3 MMhops Bridging and Comparison; Table 4 Ident. against the retriever's R@1 and
R@pool per benchmark (MMhops per Bridge / Compare). Each column here carries all four figures, and the question
types (InfoSeek and MMhops String / Numerical / Time, E-VQA templated / automatic / multi_answer / 2_hop) are
columns of their own. A row's subset and question type come from what ``ragym prep`` wrote into it. A figure
that cannot be computed is n/a, and ``not_available`` says why, per column (``ragym eval`` prints it). ``ragym
eval`` reaches them through KB-VQA's hooks (``EnvHooks.eval_tables``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from ragym.envs.metrics import eval_figures as figures

SUBSETS: dict[str, tuple[tuple[str, str], ...]] = {
    "evqa": (("single_hop", "Single-Hop"), ("two_hop", "Two-Hop")),
    "infoseek": (("unseen_question", "Unseen-Q"), ("unseen_entity", "Unseen-E")),
    "mmhops": (("bridge", "Bridging"), ("compare", "Comparison")),
}
"""Per benchmark: (subset key, the paper's column title), in the paper's order."""
TABLES = {"evqa": "Tables 2, 4", "infoseek": "Tables 2, 4", "mmhops": "Tables 3, 4"}
"""Where the paper reports each benchmark."""
QUESTION_TYPES = {
    "evqa": ("templated", "automatic", "multi_answer", "2_hop"),
    "infoseek": ("String", "Numerical", "Time"),
    "mmhops": ("String", "Numerical", "Time"),
}
"""Each benchmark's question types, in table order."""
FIGURES = (("accuracy", "Acc."), ("ident", "Ident."), ("retriever_r1", "R@1"), ("retriever_r_pool", "R@pool"))
"""(figure key, row title) of each column."""
NO_GOLD = "no episode in it has a gold entity for every query image"
"""Why Ident., R@1 and R@pool are n/a where the rows name no gold entity."""
GOLD_NOTES = {
    "mmhops": "MMhops names no gold entity per query image (its release has no gold-entity column), so "
    "Table 4's MMhops Ident. and R@k need golds ragym cannot derive; these rows train and score on the answer "
    "alone (docs/data.md)",
}
"""Per benchmark, why its rows may have no gold entity (said after ``NO_GOLD``)."""


class Scored(Protocol):
    """What one evaluated episode contributes here (``ragym.rl.eval.evaluate.EpisodeRecord`` is one)."""

    correct: float
    ident: float | None
    gold_ranks: list[int | None]
    pool_size: int | None
    subset: str | None
    question_type: str | None
    started: bool


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def row_groups(row: dict[str, Any]) -> tuple[str | None, str | None]:
    """(subset, question type) of a prepared row; None where its benchmark has no such column."""
    source, extra = row["data_source"], row["extra_info"]
    truth = _json(row["reward_model"]["ground_truth"])
    qtype = truth.get("question_type") if isinstance(truth, dict) else None
    if source == "evqa":
        return ("two_hop" if qtype == "2_hop" else "single_hop") if qtype else None, qtype
    if source == "infoseek":
        split = str(extra.get("split", ""))
        return next((s for s, _ in SUBSETS["infoseek"] if split.endswith(s)), None), qtype
    if source == "mmhops":
        kind = str(_json(extra["env_options"]).get("question_type", "")).lower()
        return (kind if kind in ("bridge", "compare") else None), qtype
    return None, qtype


def not_available(source: str, records: Sequence[Scored], values: dict[str, Any]) -> dict[str, str]:
    """Why each figure of ``values`` (the column of ``records``) that is None is n/a, by figure key.

    >>> not_available("mmhops", [], {"accuracy": None, "ident": None})
    {'accuracy': 'no episode in this column', 'ident': 'no episode in this column'}
    """
    reasons = {}
    for key, _ in FIGURES:
        if key not in values or values[key] is not None:
            continue
        if not records:
            reasons[key] = "no episode in this column"
        elif key != "ident" and all(r.pool_size is None for r in records):
            reasons[key] = (
                "the rows' env serves no precomputed candidate lists, on which the ceiling is measured"
            )
        else:
            reasons[key] = "; ".join(filter(None, (NO_GOLD, GOLD_NOTES.get(source))))
    return reasons


def paper_columns(source: str, records: Sequence[Scored], overall: dict[str, Any]) -> dict[str, Any] | None:
    """The paper's columns for one benchmark's episodes (``overall``: the source's figures, official accuracy
    included, as the All column); None for a data source the paper does not report."""
    if source not in SUBSETS:
        return None
    groups = {title: [r for r in records if r.subset == key] for key, title in SUBSETS[source]}
    subsets = {key: figures(groups[title]) for key, title in SUBSETS[source]}
    types = [t for t in QUESTION_TYPES[source] if any(r.question_type == t for r in records)]
    types += sorted({r.question_type for r in records if r.question_type} - set(types))
    by_type = {t: [r for r in records if r.question_type == t] for t in types}
    columns = {
        "tables": TABLES[source],
        "subsets": subsets,
        "all": {key: overall[key] for key in ("num_episodes", *(k for k, _ in FIGURES))},
        "question_types": {t: figures(by_type[t]) for t in types},
        "unassigned": sum(r.subset is None for r in records),
    }
    shown = [(title, groups[title], subsets[key]) for key, title in SUBSETS[source]]
    shown += [("All", records, columns["all"])]
    shown += [(t, by_type[t], columns["question_types"][t]) for t in types]
    reasons = {title: not_available(source, group, values) for title, group, values in shown}
    titles = dict(FIGURES)  # column title -> figure title -> why it is n/a (only the n/a ones)
    columns["not_available"] = {
        column: {titles[key]: why for key, why in why_na.items()}
        for column, why_na in reasons.items()
        if why_na
    }
    return columns


def na_notes(source: str, columns: dict[str, Any]) -> list[str]:
    """One line per reason (and set of figures) that ``source``'s table has n/a cells for, naming them.

    >>> na_notes("mmhops", {"not_available": {"Bridging": {"Ident.": "no gold"}, "All": {"Ident.": "no gold"}}})
    ['mmhops Ident. n/a in Bridging, All: no gold']
    """
    where: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for column, figures_na in columns["not_available"].items():
        for why in dict.fromkeys(figures_na.values()):
            names = tuple(figure for figure, reason in figures_na.items() if reason == why)
            where.setdefault((why, names), []).append(column)
    return [
        f"{source} {', '.join(names)} n/a in {', '.join(cols)}: {why}" for (why, names), cols in where.items()
    ]


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def markdown(source: str, columns: dict[str, Any]) -> str:
    """One table: the paper's columns (subsets, All) then the question types; rows Acc., Ident., R@1, R@pool."""
    groups = [(title, columns["subsets"][key]) for key, title in SUBSETS[source]]
    groups += [("All", columns["all"]), *columns["question_types"].items()]
    lines = [
        f"### {source} (MMAgent-R² {columns['tables']})",
        "",
        "| | " + " | ".join(title for title, _ in groups) + " |",
        "|---|" + "---:|" * len(groups),
    ]
    for key, title in FIGURES:
        lines.append(f"| {title} | " + " | ".join(_cell(g[key]) for _, g in groups) + " |")
    lines.append("| episodes | " + " | ".join(str(g["num_episodes"]) for _, g in groups) + " |")
    if columns["unassigned"]:
        lines += [
            "",
            f"{columns['unassigned']} episodes belong to none of the paper's subsets (All counts them).",
        ]
    notes = na_notes(source, columns)
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"
