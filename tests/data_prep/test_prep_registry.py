"""``ragym prep NAME``: one registry of preps; every one is listed, resolves, and answers ``--help`` as itself."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ragym.data_prep import prep
from ragym.envs.hooks import env_hooks
from ragym.envs.registry import registered_envs
from ragym.rl.recipe.compose import resolve_recipe_path


def test_list_prints_every_registered_name(capsys: pytest.CaptureFixture) -> None:
    assert prep.main(["--list"]) == 0
    assert capsys.readouterr().out.split() == list(prep.PREPS)
    assert {"infoseek", "mragbench", "bright", "mmlongbench-doc", "stackexchange", "synthetic-kb"} <= set(
        prep.PREPS
    )


@pytest.mark.parametrize("name", sorted(prep.PREPS))
def test_every_prep_runs_its_own_help(name: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        prep.main([name, "--help"])
    assert done.value.code == 0
    assert f"usage: ragym prep {name}" in capsys.readouterr().out


LIMITED = [
    "infoseek",
    "evqa",
    "mmhops",
    "mragbench",
    "bright",
    "mm-bright",
    "mmlongbench-doc",
    "stackexchange",
]


@pytest.mark.parametrize("name", LIMITED)
@pytest.mark.parametrize("limit", ["-1", "0", "ten"])
def test_a_limit_below_one_row_is_refused(name: str, limit: str, capsys: pytest.CaptureFixture) -> None:
    """``--limit -1`` sliced rows off the end and ``--limit 0`` wrote no row, both silently."""
    with pytest.raises(SystemExit) as done:
        prep.main([name, "--limit", limit])
    assert done.value.code == 2
    assert "argument --limit: must be a whole number >= 1 (rows to read)" in capsys.readouterr().err


def test_every_prep_with_a_limit_is_checked(capsys: pytest.CaptureFixture) -> None:
    for name in prep.PREPS:
        with pytest.raises(SystemExit):
            prep.main([name, "--help"])
        assert ("--limit" in capsys.readouterr().out) == (name in LIMITED), name


def test_an_unknown_prep_is_refused_with_the_list(capsys: pytest.CaptureFixture) -> None:
    assert prep.main(["nosuch"]) == 2
    err = capsys.readouterr().err
    assert "unknown prep 'nosuch'" in err and "synthetic-kb" in err


def test_a_prep_runs_through_the_registry(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert prep.main(["synthetic-kb", "--out", str(tmp_path / "kb"), "--preset", "tiny"]) == 0
    rows = pd.read_parquet(tmp_path / "kb" / "data" / "train.parquet")
    assert len(rows) > 0 and set(rows["agent_name"]) == {"ragym_env"}


def test_only_row_writing_preps_take_the_budget_flags(tmp_path: Path) -> None:
    from ragym.rl.prep import main as ragym_prep

    # synthetic-kb writes no report-worthy rows: a budget flag is not one of its options.
    with pytest.raises(SystemExit):
        ragym_prep(["synthetic-kb", "--out", str(tmp_path / "kb"), "--no-budget-report"])
    # data preparation alone never takes them: the budget report is the ragym prep command's (rl)
    with pytest.raises(SystemExit):
        prep.main(["mragbench", "--raw", str(tmp_path), "--out", str(tmp_path / "o"), "--no-budget-report"])
    # every env's hooks name a shipped paper recipe for the budget report of the rows its preps write
    for env_id in registered_envs():
        assert resolve_recipe_path(env_hooks(env_id).paper_recipe).is_file(), env_id
