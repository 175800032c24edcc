"""``ragym memora-baseline``: the fixed pipeline over prepared rows and the synthetic stream, scored offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.rewards import Episode
from ragym.rl.cli import main as ragym
from ragym.rl.prep import main as prep_main
from tests.data_prep.bright_fixtures import write_bright


def test_baseline_on_prepared_bright_rows(tmp_path: Path, capsys) -> None:
    raw, data = write_bright(tmp_path / "raw"), tmp_path / "data"
    prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(data)])
    capsys.readouterr()
    split = [str(data / "data" / "test.parquet"), "--warmup", str(data / "data" / "warmup.parquet")]
    assert ragym(["memora-baseline", "--data", *split, "--out", str(tmp_path / "o")]) == 0
    headline = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (headline["episodes"], headline["warmup_episodes"]) == (1, 1)
    assert 0.0 <= headline["first_stage_ndcg@10"] <= headline["ndcg@10"] + 1.0
    # The held-out row reads the warm-up row's episode (rows with the same env_kwargs share the env) ...
    assert headline["memory_hits"] == pytest.approx(1.0)
    (episode,) = [
        Episode.from_dict(json.loads(line))
        for line in (tmp_path / "o" / "episodes.jsonl").read_text().splitlines()
    ]
    # ... and never writes its own (the memory is frozen once the warm-up is over).
    assert [e["reason"] for e in episode.events if e["type"] == "memory_write"] == ["frozen"]
    assert episode.ground_truth["excluded_ids"] == ["moth_lamps/Lamp_2.txt"]
    # The paper's order: decompose, a subquery then an extraction per factor, ..., stop.
    kinds = [e["kind"] for e in episode.events if e["type"] == "action"]
    assert kinds[:7] == ["decompose"] + ["subquery"] * 3 + ["extract"] * 3 and kinds[-1] == "stop"
    assert headline["actions"] == pytest.approx(len(episode.turns))
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["reward"]["reward/ndcg"] == pytest.approx(headline["ndcg@10"])
    assert metrics["llm_calls"]["llm_calls/total"] == headline["llm_calls"] >= 1 + 3 + 3


def test_held_out_rows_that_are_warm_up_rows_are_refused(tmp_path: Path) -> None:
    raw, data = write_bright(tmp_path / "raw"), tmp_path / "data"
    prep_main(
        ["bright", "--raw", str(raw), "--task", "biology", "--out", str(data), "--warmup-fraction", "1"]
    )
    rows = str(data / "data" / "warmup.parquet")
    with pytest.raises(ValueError, match="also warm-up queries"):
        ragym(["memora-baseline", "--data", rows, "--warmup", rows, "--out", str(tmp_path / "o")])


def test_no_held_out_query_reads_a_held_out_episode(tmp_path: Path, capsys) -> None:
    """The leak of issue 30: held-out queries wrote scored episodes that later held-out queries read."""
    from ragym.envs.memora.corpus import synthetic_collection

    assert ragym(["memora-baseline", "--synthetic", "40", "--out", str(tmp_path)]) == 0
    headline = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (headline["warmup_episodes"], headline["episodes"]) == (32, 8)  # chronological 80 / 20
    stream = synthetic_collection(0)[0].queries
    warmup = {q["query"] for q in stream[:32]}
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    for episode in [Episode.from_dict(json.loads(line)) for line in lines]:
        (read,) = [e for e in episode.events if e["type"] == "memory_read"]
        (write,) = [e for e in episode.events if e["type"] == "memory_write"]
        assert read["num_records"] == 32 and set(read["queries"]) <= warmup and write["reason"] == "frozen"
    ids = [json.loads(line)["events"][1]["query_id"] for line in lines]
    assert ids == [q["id"] for q in stream[32:40]]


def test_baseline_on_the_synthetic_stream_beats_the_first_stage(tmp_path: Path, capsys) -> None:
    assert ragym(["memora-baseline", "--synthetic", "30", "--out", str(tmp_path)]) == 0
    headline = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert headline["ndcg@10"] > headline["first_stage_ndcg@10"] + 0.2


def test_without_warmup_the_held_out_rows_still_never_write(tmp_path: Path) -> None:
    """An env first built in the held-out phase is frozen too: no held-out row reads another's episode."""
    from ragym.envs.memora.models import ScriptedModel
    from ragym.envs.memora.pipeline import MemoraPipeline
    from ragym.envs.memora.synthetic import FACETS
    from ragym.rl.eval.memora_baseline import run, synthetic_rows

    _, held_out = synthetic_rows(40)
    summary = run(held_out, MemoraPipeline(ScriptedModel(facets=FACETS)), tmp_path)
    assert summary["num_warmup_episodes"] == 0 and summary["episode"]["memory_hits"] == 0.0
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    writes = [e for line in lines for e in json.loads(line)["events"] if e["type"] == "memory_write"]
    assert len(writes) == 8 and {w["reason"] for w in writes} == {"frozen"}
