"""``ragym rollout`` on a ``ragym prep mix`` rows file: every row runs on its own KB, as ``ragym eval``'s do."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ragym.data_prep.prep import mix
from ragym.rl.eval.scripted import main as rollout


@pytest.fixture(scope="module")
def mixed(prepared, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = next(iter(prepared.values()))[0].parent
    out = tmp_path_factory.mktemp("mix")
    mix(["--out", str(out), "--root", str(root), "infoseek=5", "evqa=2", "mmhops=3"])
    return out


def _rollout(data: Path, capsys: pytest.CaptureFixture, out: Path | None = None) -> dict:
    argv = [
        "--data",
        str(data),
        "--policy",
        "oracle",
        "--episodes",
        "100",
        *(["--out", str(out)] if out else []),
    ]
    assert rollout(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _episodes(out: Path) -> dict[tuple[str, int], list]:
    """(data source, row index) -> the episode's events, from the traces ``--out`` wrote."""
    lines = (out / "traces" / "episodes.jsonl").read_text().splitlines()
    return {(e["data_source"], e["row_index"]): e["events"] for e in map(json.loads, lines)}


def test_rollout_runs_each_training_row_on_its_own_kb(prepared, mixed: Path, capsys) -> None:
    rows = pd.read_parquet(mixed / "train.parquet")
    assert rows["data_source"].nunique() == 3
    summary = _rollout(mixed / "train.parquet", capsys)
    assert summary["episodes"] == len(rows)
    assert summary["kb_dir"] == sorted(str(kb) for kb, _, _ in prepared.values())
    # Training rows passed the reachability filter on their own KB: the oracle identifies every gold entity
    # there, and none on another KB (whose entity keys are not the row's).
    assert summary["ident_acc"] == 1.0


def test_rollout_on_mixed_eval_rows_equals_each_kb_alone(
    prepared, mixed: Path, tmp_path: Path, capsys
) -> None:
    rows = pd.read_parquet(mixed / "val.parquet")
    together = _rollout(mixed / "val.parquet", capsys, tmp_path / "together")
    assert together["episodes"] == len(rows)
    alone = {}
    for source, group in rows.groupby("data_source"):
        group.to_parquet(tmp_path / f"{source}.parquet")
        _rollout(tmp_path / f"{source}.parquet", capsys, tmp_path / source)
        alone |= _episodes(tmp_path / source)
    # The same episodes, down to the candidates each KB served, whether the rows come mixed or alone.
    assert _episodes(tmp_path / "together") == alone and len(alone) == len(rows)
