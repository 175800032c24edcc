"""``ragym score --recipe R --episodes FILE.jsonl``: score saved episodes with a reward recipe, offline.

Prints one row per term (weight, mean over the episodes where it applied, how many applied, how many
were None) and the mean total, so an edited recipe can be checked before a training job is launched.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ragym import rewards  # noqa: F401  (registers the built-in rewards)
from ragym.envs.files import read_jsonl
from ragym.rewards.answers import answer_metric_name
from ragym.rewards.episode import Episode
from ragym.rewards.rubric import RewardError, Rubric, RubricResult


def read_episodes(path: Path) -> Iterator[Episode]:
    """Episodes from a jsonl file of ``Episode.to_json()`` lines; a bad line is an error naming it."""
    for number, row in read_jsonl(path):
        try:
            yield Episode.from_dict(row)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}:{number}: not an episode: {err}") from err


def breakdown_table(rubric: Rubric, results: list[RubricResult]) -> str:
    """The per-term table: weight, mean (over applied), count (applied), none (skipped)."""
    rows = [("term", "reward", "weight", "mean", "count", "none")]
    for term in rubric.terms:
        values = [r.breakdown[term.name] for r in results]
        applied = [v for v in values if v is not None]
        mean = f"{sum(applied) / len(applied):.4f}" if applied else "-"
        rows.append(
            (
                term.name,
                term.reward,
                f"{term.weight:g}",
                mean,
                str(len(applied)),
                str(len(values) - len(applied)),
            )
        )
    totals = [r.total for r in results]
    rows.append(
        ("TOTAL", "", "", f"{sum(totals) / len(totals):.4f}" if totals else "-", str(len(totals)), "0")
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if i < 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragym score", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "--recipe", required=True, type=Path, help="reward recipe YAML, or a training recipe that holds one"
    )
    parser.add_argument("--episodes", required=True, type=Path, help="jsonl of Episode.to_json() lines")
    parser.add_argument(
        "--per-episode", action="store_true", help="also print each episode's breakdown as jsonl"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ragym score``; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        rubric = Rubric.from_recipe(args.recipe)
        if not args.episodes.is_file():
            raise FileNotFoundError(f"episodes file {args.episodes} does not exist")
        results, sources = [], Counter()
        for number, episode in enumerate(read_episodes(args.episodes), start=1):
            sources[episode.data_source] += 1
            try:
                results.append(rubric.score(episode))
            except RewardError as err:
                raise RewardError(f"{args.episodes}: episode {number}: {err}") from err
            if args.per_episode:
                print(json.dumps({"episode": number, "total": results[-1].total, **results[-1].breakdown}))
    except (FileNotFoundError, ValueError, RewardError) as err:
        print(f"ragym score: {err}", file=sys.stderr)
        return 2
    print(f"recipe {args.recipe} ({rubric.name or 'unnamed'}), {len(results)} episodes from {args.episodes}")
    print(breakdown_table(rubric, results))
    print("data sources: " + ", ".join(f"{k}={v}" for k, v in sorted(sources.items())))
    for note in _metric_notes(rubric, sources):
        print(f"note: {note}")
    return 0


def _metric_notes(rubric: Rubric, sources: Counter) -> list[str]:
    """Labels a reader of the table must see (E-VQA scored by exact match only)."""
    notes = []
    for term in rubric.terms:
        if term.reward == "outcome" and sources.get("evqa") and not term.params.get("bem_model_path"):
            notes.append(
                f"term {term.name!r} scores E-VQA by exact match only ({answer_metric_name('evqa')}); "
                "set params.bem_model_path to add the BEM step of the official metric"
            )
    return notes


if __name__ == "__main__":
    sys.exit(main())
