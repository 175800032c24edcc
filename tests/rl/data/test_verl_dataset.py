"""verl's dataset path runs ragym's row check: bad rows are listed as ``ragym train`` lists them, then skipped
(the dataset holds the valid rows only) or refused (``data.bad_rows=refuse`` stops before training)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ragym.rl.data.rows import DataError
from tests.rl.data.bad_rows import with_bad_rows


@pytest.fixture(scope="module")
def kb(tmp_path_factory) -> Path:
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    return build_kb(
        tmp_path_factory.mktemp("verl_rows") / "kb", PRESETS["demo"], seed=0, name="synthetic-demo"
    )


def _dataset(files: list[Path], tokenizer, tmp_path: Path, **data: object):
    """The dataset as verl's ``create_rl_dataset`` builds it from a recipe's ``data`` section."""
    from verl.trainer.ppo.utils import create_rl_dataset

    config = OmegaConf.create(
        {
            "custom_cls": {"path": "pkg://ragym.rl.data.verl_dataset", "name": "RagymDataset"},
            "cache_dir": str(tmp_path / "cache"),
            "max_prompt_length": 100_000,
            "filter_overlong_prompts": False,
            "prompt_key": "prompt",
            **data,
        }
    )
    return create_rl_dataset([str(f) for f in files], config, tokenizer, None, is_train=True)


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_dir("qwen2_5_vl"))


def test_verl_reads_only_the_valid_rows_and_names_each_bad_one(kb, tmp_path, tokenizer, caplog):
    data = tmp_path / "rows.parquet"
    positions = with_bad_rows(kb / "data" / "test.parquet", data, num_good=3)
    good = with_bad_rows(kb / "data" / "test.parquet", tmp_path / "more.parquet", num_good=2)
    with caplog.at_level(logging.WARNING, logger="ragym.rl.data.rows"):
        dataset = _dataset([data, tmp_path / "more.parquet"], tokenizer, tmp_path)
    # 3 + 2 good rows; the 3 bad rows of each file are out.
    assert len(dataset) == 5
    assert all(row["extra_info"]["index"] < 1000 for row in (dataset[i] for i in range(len(dataset))))
    assert f"rows.parquet row {positions['missing_image']} (extra_info.index 1002)" in caplog.text
    assert f"rows.parquet row {positions['invalid_env_options']} (extra_info.index 1001)" in caplog.text
    assert f"more.parquet row {good['missing_extra_info']} (extra_info.index None): " in caplog.text
    assert "skipping 6 bad row(s) of 11" in caplog.text


def test_refuse_stops_before_training(kb, tmp_path, tokenizer):
    data = tmp_path / "rows.parquet"
    with_bad_rows(kb / "data" / "test.parquet", data, num_good=2)
    with pytest.raises(DataError, match=r"3 bad row\(s\) in .*rows.parquet \(first: .*row 2 "):
        _dataset([data], tokenizer, tmp_path, bad_rows="refuse")
    with pytest.raises(ValueError, match="data.bad_rows='drop' is not one of skip, refuse"):
        _dataset([data], tokenizer, tmp_path, bad_rows="drop")


def test_sampled_rows_are_named_by_position_in_the_sample(kb, tmp_path, tokenizer, caplog):
    data = tmp_path / "rows.parquet"
    with_bad_rows(kb / "data" / "test.parquet", data, num_good=1)
    from verl.trainer.ppo.utils import create_rl_dataset

    config = OmegaConf.create(
        {
            "custom_cls": {"path": "pkg://ragym.rl.data.verl_dataset", "name": "RagymDataset"},
            "cache_dir": str(tmp_path / "cache"),
            "filter_overlong_prompts": False,
            "shuffle": False,
        }
    )
    with caplog.at_level(logging.WARNING, logger="ragym.rl.data.rows"):
        dataset = create_rl_dataset([str(data)], config, tokenizer, None, max_samples=2)
    assert len(dataset) == 1  # the first 2 rows: one good, then the row without extra_info
    assert (
        "sample of " in caplog.text
        and "row 1 (extra_info.index None): ValueError: extra_info is missing" in caplog.text
    )
