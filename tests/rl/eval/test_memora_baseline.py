"""``ragym memora-baseline``: the fixed pipeline over prepared rows and the synthetic stream, scored offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.prep import main as prep_main
from rewards import Episode
from rl.cli import main as ragym
from tests.data_prep.bright_fixtures import write_bright


def test_baseline_on_prepared_bright_rows(tmp_path: Path, capsys) -> None:
    raw, data = write_bright(tmp_path / "raw"), tmp_path / "data"
    prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(data)])
    capsys.readouterr()
    assert (
        ragym(
            ["memora-baseline", "--data", str(data / "data" / "test.parquet"), "--out", str(tmp_path / "o")]
        )
        == 0
    )
    headline = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert headline["episodes"] == 2 and 0.0 <= headline["first_stage_ndcg@10"] <= headline["ndcg@10"] + 1.0
    # The second row sees the first one's memory (rows with the same env_kwargs share the env).
    assert headline["memory_hits"] == pytest.approx(0.5)
    episodes = [
        Episode.from_dict(json.loads(line))
        for line in (tmp_path / "o" / "episodes.jsonl").read_text().splitlines()
    ]
    assert [e.ground_truth["excluded_ids"] for e in episodes] == [[], ["moth_lamps/Lamp_2.txt"]]
    for (
        episode
    ) in episodes:  # the paper's order: decompose, a subquery then an extraction per factor, ..., stop
        kinds = [e["kind"] for e in episode.events if e["type"] == "action"]
        assert kinds[:7] == ["decompose"] + ["subquery"] * 3 + ["extract"] * 3 and kinds[-1] == "stop"
    assert headline["actions"] == pytest.approx(sum(len(e.turns) for e in episodes) / 2)
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["reward"]["reward/ndcg"] == pytest.approx(headline["ndcg@10"])


def test_baseline_on_the_synthetic_stream_beats_the_first_stage(tmp_path: Path, capsys) -> None:
    assert ragym(["memora-baseline", "--synthetic", "30", "--out", str(tmp_path)]) == 0
    headline = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert headline["ndcg@10"] > headline["first_stage_ndcg@10"] + 0.2
