"""The token budget report every prep prints for the rows it wrote (``ragym budget``, on a bounded sample).

Each prep's rows are reported at their env's shipped paper recipe (``EnvHooks.paper_recipe`` of the first row's
env; ``--budget-recipe`` picks another,
``--no-budget-report`` skips it); without a local copy of the recipe's model the text tokens are estimated, and
the report says so. A report that cannot run is one line on stderr: the rows are written either way.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ragym.envs.hooks import hook
from ragym.rl.budget.cli import prep_report
from ragym.rl.errors import UsageError
from ragym.rl.recipe.compose import resolve_recipe_path

logger = logging.getLogger(__name__)

SAMPLE_ROWS = 200
"""Rows reported by default (a seeded sample), so a prep of 100k rows stays fast."""


@dataclass(frozen=True)
class BudgetOptions:
    """What the budget flags asked for."""

    recipe: str | None
    """``--budget-recipe`` (None: the prep's paper recipe)."""
    enabled: bool
    """False with ``--no-budget-report``."""
    rows: int
    """``--budget-rows``: rows sampled."""


def add_budget_args(parser: argparse.ArgumentParser) -> None:
    """The budget flags, on a prep's parser."""
    parser.add_argument(
        "--budget-recipe", help="recipe of the token budget report (default: the env's paper recipe)"
    )
    parser.add_argument("--no-budget-report", action="store_true", help="skip the token budget report")
    parser.add_argument(
        "--budget-rows",
        type=int,
        default=SAMPLE_ROWS,
        help=f"rows the budget report samples (default {SAMPLE_ROWS})",
    )


def split_budget_args(argv: Sequence[str]) -> tuple[list[str], BudgetOptions]:
    """(the prep's own arguments, the budget options) from a prep command line."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_budget_args(parser)
    known, rest = parser.parse_known_args(list(argv))
    return rest, options_of(known)


def options_of(args: argparse.Namespace) -> BudgetOptions:
    """The budget options of parsed arguments; a recipe that does not exist is refused before any prep work."""
    if args.budget_rows < 1:
        raise UsageError(f"--budget-rows must be >= 1, got {args.budget_rows}")
    if args.budget_recipe and not args.no_budget_report:
        try:
            resolve_recipe_path(args.budget_recipe)
        except FileNotFoundError as err:
            raise UsageError(f"--budget-recipe: {err}") from err
    return BudgetOptions(args.budget_recipe, not args.no_budget_report, args.budget_rows)


def print_budget_report(prep: str, files: Sequence[Path], options: BudgetOptions) -> dict | None:
    """Print the report for ``files`` (the rows ``prep`` wrote); None when skipped or when it cannot run."""
    files = [f for f in files if f.is_file()]
    if not options.enabled or not files:
        return None
    try:
        recipe = options.recipe or paper_recipe(files[0])
        return prep_report(files, recipe, options.rows)
    except UsageError as err:
        print(f"ragym prep {prep}: no budget report ({options.recipe or files[0]}): {err}", file=sys.stderr)
        return None


def paper_recipe(rows: Path) -> str:
    """The paper recipe of the env the first row of ``rows`` (a parquet file) resets (``EnvHooks.paper_recipe``)."""
    import pyarrow.parquet as pq

    batch = next(pq.ParquetFile(rows).iter_batches(batch_size=1, columns=["extra_info"]), None)
    if batch is None or batch.num_rows == 0:
        raise UsageError(f"{rows} has no rows")
    env_id = str(batch.column("extra_info")[0].as_py()["env_id"])
    try:
        return hook(env_id, "paper_recipe", "the budget report")
    except LookupError as err:  # MissingHook, or an env that is not registered
        raise UsageError(str(err)) from None
