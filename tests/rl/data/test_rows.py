"""Row validation at load time: bad rows are listed by file position and extra_info.index, then skipped or refused."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragym.data_prep.toy_data import toy_rows
from ragym.rl.data.rows import BadRow, DataError, load_rows
from tests.rl.data.bad_rows import BAD_KINDS, truncated_copy, with_bad_rows


@pytest.fixture(scope="module")
def kb(tmp_path_factory) -> Path:
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    return build_kb(tmp_path_factory.mktemp("rows") / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")


def test_each_bad_row_is_listed_with_position_and_index_then_skipped(kb, tmp_path, caplog):
    data = tmp_path / "rows.parquet"
    positions = with_bad_rows(kb / "data" / "test.parquet", data, num_good=4)
    with caplog.at_level(logging.WARNING, logger="ragym.rl.data.rows"):
        rows = load_rows(str(data))
    assert len(rows.rows) == 4 and [p for _, p in rows.positions] == [0, 1, 2, 3]
    by_position = {bad.position: bad for bad in rows.bad}
    assert set(by_position) == set(positions.values())
    assert "extra_info is missing" in by_position[positions["missing_extra_info"]].reason
    assert "env_options is not valid JSON" in by_position[positions["invalid_env_options"]].reason
    missing = by_position[positions["missing_image"]]
    assert "No such file" in missing.reason and missing.index == 1000 + BAD_KINDS.index("missing_image")
    logged = caplog.text
    assert f"row {positions['missing_image']} (extra_info.index 1002)" in logged
    assert f"row {positions['invalid_env_options']} (extra_info.index 1001)" in logged


def test_refuse_lists_the_first_bad_row_in_one_line(kb, tmp_path):
    data = tmp_path / "rows.parquet"
    with_bad_rows(kb / "data" / "test.parquet", data, num_good=2)
    with pytest.raises(DataError) as err:
        load_rows(str(data), on_bad="refuse")
    message = str(err.value)
    assert "\n" not in message and "3 bad row(s)" in message and "row 2 (extra_info.index None)" in message


def test_a_truncated_file_is_one_error_or_a_skipped_file(kb, tmp_path):
    broken = truncated_copy(kb / "data" / "test.parquet", tmp_path / "broken.parquet")
    with pytest.raises(DataError, match="broken.parquet is not a readable parquet file"):
        load_rows(str(broken))
    rows = load_rows([str(broken), str(kb / "data" / "test.parquet")], limit=3)
    assert len(rows.rows) == 3
    assert rows.bad == [BadRow(str(broken), None, None, rows.bad[0].reason)]
    with pytest.raises(DataError, match="not found"):
        load_rows(str(tmp_path / "absent.parquet"))
    # A folder (the prep's output, say) is named as one, not as a file that is missing.
    with pytest.raises(DataError, match="is a folder; give the parquet file in it"):
        load_rows(str(kb / "data"))


def test_nonsense_env_settings_are_bad_rows_naming_the_field(kb, tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(kb / "data" / "test.parquet").slice(0, 2)
    rows = table.to_pylist()
    kwargs = json.loads(rows[1]["extra_info"]["env_kwargs"]) | {"max_turns": 0}
    rows[1]["extra_info"]["env_kwargs"] = json.dumps(kwargs)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), tmp_path / "r.parquet")
    loaded = load_rows(str(tmp_path / "r.parquet"))
    assert len(loaded.rows) == 1 and "max_turns" in loaded.bad[0].reason


def test_no_valid_row_is_an_error_but_limit_zero_is_empty(kb, tmp_path):
    assert load_rows(str(kb / "data" / "test.parquet"), limit=0).rows == []
    data = tmp_path / "rows.parquet"
    with_bad_rows(kb / "data" / "test.parquet", data, num_good=0)
    with pytest.raises(DataError, match="no valid rows"):
        load_rows(str(data))


def test_fingerprint_changes_with_the_rows_used(kb):
    first = load_rows(str(kb / "data" / "test.parquet"), limit=4)
    assert first.fingerprint() == load_rows(str(kb / "data" / "test.parquet"), limit=4).fingerprint()
    assert first.fingerprint() != load_rows(str(kb / "data" / "test.parquet"), limit=5).fingerprint()


def test_checking_every_row_keeps_the_image_cache_bounded(kb, monkeypatch):
    from ragym.envs.image_cache import IMAGE_CACHE, clear_image_cache
    from ragym.rl.data.rows import RowChecker

    clear_image_cache()
    monkeypatch.setattr(RowChecker, "IMAGE_CACHE_ROWS", 4)
    rows = load_rows(str(kb / "data" / "test.parquet"), limit=10)
    assert len(rows.rows) == 10 and IMAGE_CACHE.num_entries < 4


GOOD_PROMPT = [{"role": "user", "content": "Which bird is this?"}]


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        (None, "prompt is missing"),
        ([], "prompt is an empty list"),
        ("", "prompt must be a list of chat messages"),
        ("Which bird is this?", "prompt must be a list of chat messages"),
        ({"role": "user", "content": "x"}, "prompt must be a list of chat messages"),
        ([{"role": "user"}], "is not a {role, content} chat message"),
        (["Which bird is this?"], "is not a {role, content} chat message"),
        (GOOD_PROMPT, None),
        (np.array(GOOD_PROMPT, dtype=object), None),  # how pandas returns a parquet list column
    ],
)
def test_a_row_whose_prompt_verl_cannot_render_is_bad(kb, prompt, reason):
    import pandas as pd

    from ragym.rl.data.rows import RowChecker

    row = pd.read_parquet(kb / "data" / "test.parquet").to_dict(orient="records")[0] | {"prompt": prompt}
    checker = RowChecker(check_reset=False)
    if reason is None:
        checker.check(row)
    else:
        with pytest.raises(ValueError, match=re.escape(reason)):
            checker.check(row)


def test_rows_with_empty_or_null_prompts_are_listed_and_skipped(kb, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(kb / "data" / "test.parquet").slice(0, 3)
    rows = table.to_pylist()
    rows[1]["prompt"], rows[2]["prompt"] = [], None
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), tmp_path / "r.parquet")
    loaded = load_rows(str(tmp_path / "r.parquet"))
    assert [p for _, p in loaded.positions] == [0]
    assert [(bad.position, bad.reason.split(": ", 1)[1]) for bad in loaded.bad] == [
        (1, "prompt is an empty list (no chat message)"),
        (2, "prompt is missing"),
    ]


def _memora_rows(path: Path, memory_dirs: list[str | None]) -> Path:
    """MEMORA-v0 rows of the toy data (its synthetic domain), each with or without a memory folder."""
    toy = pd.read_parquet(toy_rows("MEMORA-v0", path.parent / "toy") / "train.parquet").to_dict("records")
    rows = []
    for row, memory_dir in zip(toy, memory_dirs, strict=False):
        kwargs = json.loads(row["extra_info"]["env_kwargs"])
        kwargs = {**kwargs, "memory_dir": memory_dir} if memory_dir is not None else {}
        rows.append({**row, "extra_info": {**row["extra_info"], "env_kwargs": json.dumps(kwargs)}})
    pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.mark.parametrize("on_bad", ["skip", "refuse"])
def test_memora_rows_without_a_memory_folder_refuse_the_run(tmp_path, on_bad):
    """The agent loop builds one env per episode: MEMORA-v0 rows without memory_dir would train and validate
    with an empty episodic memory, so the whole run stops (even under skip), naming the row and the fix."""
    data = _memora_rows(tmp_path / "memora.parquet", [str(tmp_path / "memory"), None])
    with pytest.raises(DataError) as err:
        load_rows(str(data), on_bad=on_bad)
    message = str(err.value)
    assert "\n" not in message and "memora.parquet row 1" in message
    assert "env_kwargs.memory_dir" in message and "--memory-dir DIR" in message


def test_memora_rows_with_a_memory_folder_load_and_budgets_do_not_ask(tmp_path):
    data = _memora_rows(tmp_path / "memora.parquet", [str(tmp_path / "memory")] * 2)
    assert len(load_rows(str(data)).rows) == 2
    bare = _memora_rows(tmp_path / "bare.parquet", [None, None])
    assert len(load_rows(str(bare), check_reset=False).rows) == 2  # `ragym budget` runs no episode


def test_toy_memora_rows_share_a_memory_the_test_rows_read_frozen(tmp_path):
    """`ragym train --toy` on the MEMORA recipe passes the check: its train rows write one memory folder."""
    from ragym.data_prep.toy_data import toy_rows

    data = toy_rows("MEMORA-v0", tmp_path)
    for split, frozen in (("train", False), ("test", True)):
        loaded = load_rows(str(data / f"{split}.parquet"), limit=2)
        kwargs = [json.loads(row["extra_info"]["env_kwargs"]) for row in loaded.rows]
        assert {(k["memory_dir"], k["memory_frozen"]) for k in kwargs} == {(str(tmp_path / "memory"), frozen)}
