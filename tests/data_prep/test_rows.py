"""The one verl row builder: verl's schema, ragym's extra_info, JSON strings that read back as given."""

from __future__ import annotations

import json

from ragym.data_prep.rows import AGENT_NAME, verl_row
from ragym.rl.agent_loop.loop import AGENT_NAME as LOOP_NAME


def test_row_has_verls_schema_and_reads_back() -> None:
    truth, kwargs, options = (
        {"answer": "Zürich"},
        {"kb_dir": "/kb", "k": 5},
        {"question": "Where?", "ids": [1]},
    )
    row = verl_row(
        data_source="infoseek",
        ability="kbvqa",
        question="Where?",
        ground_truth=truth,
        index=3,
        split="val",
        env_id="KBVQA-v0",
        env_kwargs=kwargs,
        env_options=options,
        sample_id="s3",
    )
    assert set(row) == {"data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"}
    assert row["prompt"] == [{"role": "user", "content": "Where?"}] and row["agent_name"] == AGENT_NAME
    assert row["reward_model"]["style"] == "rule" and json.loads(row["reward_model"]["ground_truth"]) == truth
    extra = row["extra_info"]
    assert (extra["index"], extra["split"], extra["env_id"], extra["sample_id"]) == (
        3,
        "val",
        "KBVQA-v0",
        "s3",
    )
    assert json.loads(extra["env_kwargs"]) == kwargs and json.loads(extra["env_options"]) == options
    assert "Zürich" in row["reward_model"]["ground_truth"]  # readable, not \\u-escaped


def test_rows_ask_for_the_registered_agent_loop() -> None:
    assert AGENT_NAME == LOOP_NAME
