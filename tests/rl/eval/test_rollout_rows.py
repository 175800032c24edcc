"""``ragym rollout --data``: rows come from ragym.rl.data.rows, so bad rows are listed and skipped (or refused)."""

from __future__ import annotations

import json

import pytest

from ragym.rl.data.rows import DataError
from ragym.rl.eval.scripted import main
from tests.rl.data.bad_rows import with_bad_rows


def test_rollout_skips_bad_rows_or_refuses_them(tmp_path, capsys):
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    kb = build_kb(tmp_path / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    data = tmp_path / "rows.parquet"
    with_bad_rows(kb / "data" / "test.parquet", data, num_good=3)
    assert main(["--data", str(data), "--policy", "signature"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["episodes"] == 3 and printed["kb_dir"] == str(kb)
    with pytest.raises(DataError, match="3 bad row"):
        main(["--data", str(data), "--bad-rows", "refuse"])
