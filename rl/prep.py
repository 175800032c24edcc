"""``ragym prep NAME ...``: one registered data prep (``ragym.data_prep.prep``), then the token budget report of a
sample of the rows it wrote (``ragym.rl.budget.prep_report``: ``--budget-recipe R``, ``--budget-rows N``,
``--no-budget-report``). Data preparation itself never imports the trainer side; this command joins the two."""

from __future__ import annotations

from ragym.data_prep import prep
from ragym.rl.budget.prep_report import print_budget_report, split_budget_args


def main(argv: list[str]) -> int:
    """``ragym prep``: the prep's exit status (the budget report never changes it)."""
    if not argv or argv[0] not in prep.PREPS or not prep.PREPS[argv[0]].budget:
        return prep.main(argv)
    name = argv[0]
    rest, budget = split_budget_args(argv[1:])
    status = prep.main([name, *rest])
    if status == 0:
        print_budget_report(name, prep.written_rows(name, rest), budget)
    return status
