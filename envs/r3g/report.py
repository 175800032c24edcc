"""R3G's reported numbers from episodes: accuracy and Recall@1/3/5, overall and per scenario (paper, 4.x).

Recall@K is R3G's: 1 when any ground-truth image is in the top K of the final pool ranking; 0 in an episode the
env ended by raising. Every value comes from the episode's events (``ragym.envs.r3g.metrics``) and its outcome
score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragym.envs.events import events_of
from ragym.envs.metrics import episode_metrics
from ragym.envs.r3g.metrics import RECALL_KS

COLUMNS = ("accuracy", *(f"recall@{k}" for k in RECALL_KS), "gold_in_pool", "judge_errors", "format_errors")
"""The summary's per-group metrics, in table order."""


@dataclass(frozen=True)
class EpisodeScore:
    """What one R3G episode contributes: its events, its outcome score and its scenario."""

    events: list[dict[str, Any]]
    correct: float
    scenario: str | None
    """None where the env could not start: only its ``r3g_task`` event names the scenario."""


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _group(episodes: list[EpisodeScore]) -> dict[str, Any]:
    # episode_metrics: an episode the env ended by raising recalls nothing (r3g_failed_metrics), as in training.
    metrics = [episode_metrics("R3G-v0", e.events) for e in episodes]
    out: dict[str, Any] = {"num_episodes": len(episodes), "accuracy": _mean([e.correct for e in episodes])}
    for key in COLUMNS[1:-1]:
        out[key] = _mean([m.get(key) for m in metrics])
    out["format_errors"] = _mean(
        [float(sum(ev["type"] == "format_error" for ev in e.events)) for e in episodes]
    )
    return out


def summarize(episodes: list[EpisodeScore]) -> dict[str, Any]:
    """Overall and per-scenario accuracy and recall (scenarios sorted by name); an episode whose env could not
    start is in ``all`` (wrong, recalling nothing) and in no scenario, counted in ``all``'s ``num_not_started``.

    >>> from ragym.envs.r3g import events as r3g_ev
    >>> evs = [r3g_ev.r3g_task(["g"], "Angle", 2, 1, "fused", True),
    ...        r3g_ev.evidence_selected(1, ["x", "g"], [0.5, 0.5], [0.0, 1.0], [0.5, 1.5], [1], ["g"], "fused")]
    >>> s = summarize([EpisodeScore(evs, 1.0, "Angle"), EpisodeScore(evs, 0.0, "Scope")])
    >>> s["all"]["accuracy"], s["all"]["recall@1"], s["by_scenario"]["Scope"]["accuracy"]
    (0.5, 1.0, 0.0)
    """
    scenarios = sorted({e.scenario for e in episodes if e.scenario is not None})
    return {
        "all": {**_group(episodes), "num_not_started": sum(e.scenario is None for e in episodes)},
        "by_scenario": {s: _group([e for e in episodes if e.scenario == s]) for s in scenarios},
    }


def _cell(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if key in ("judge_errors", "format_errors") else f"{100 * value:.1f}"


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """One table per system (name -> ``summarize`` output): overall, then each scenario."""
    header = "| group | n | " + " | ".join(COLUMNS) + " |\n|---|---:|" + "---:|" * len(COLUMNS)
    parts = []
    for name, summary in results.items():
        groups = {"all": summary["all"], **summary["by_scenario"]}
        lines = [
            f"| {g} | {row['num_episodes']} | " + " | ".join(_cell(k, row[k]) for k in COLUMNS) + " |"
            for g, row in groups.items()
        ]
        unstarted = summary["all"]["num_not_started"]
        note = f"\n\n{unstarted} episodes whose env could not start are in all only." if unstarted else ""
        parts.append(f"## {name}\n\n{header}\n" + "\n".join(lines) + note)
    return "\n\n".join(parts) + "\n"


def r3g_summary(episodes: list[tuple[list[dict[str, Any]], float]]) -> dict[str, Any] | None:
    """``summarize`` over R3G episodes' (events, outcome) pairs, scenario from each ``r3g_task`` event (none
    where the env could not start); None without episodes (``ragym eval`` adds it per data source)."""
    scored = [
        EpisodeScore(
            events, correct, task[0]["scenario"] if (task := events_of(events, "r3g_task")) else None
        )
        for events, correct in episodes
    ]
    return summarize(scored) if scored else None
