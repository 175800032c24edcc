"""``ragym eval`` always writes what it evaluated, in strict JSON, on any registered env's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.rl.eval import evaluate
from ragym.rl.eval.evaluate import gold_ranks, summarize
from ragym.rl.eval.report import ReportStream


def _strict(path: Path) -> dict:
    def refuse(constant: str) -> None:
        raise ValueError(f"{path} holds {constant}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture(scope="module")
def kb(tmp_path_factory) -> Path:
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    return build_kb(tmp_path_factory.mktemp("eval") / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")


def _argv(model: Path, kb: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model",
        str(model),
        "--recipe",
        "kbvqa_tiny_cpu",
        "--data",
        str(kb / "data" / "test.parquet"),
        "--out",
        str(out),
        "--backend",
        "hf",
        "data.max_response_length=32",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        *extra,
    ]


def test_limit_zero_writes_strict_json(tiny_policy_dir, kb, tmp_path):
    assert evaluate.main(_argv(tiny_policy_dir("qwen2_5_vl"), kb, tmp_path / "out", "--limit", "0")) == 0
    metrics = _strict(tmp_path / "out" / "metrics.json")
    assert metrics["all"]["num_episodes"] == 0 and metrics["all"]["accuracy"] is None
    assert metrics["complete"] is True


def test_a_failure_midway_keeps_the_episodes_already_run(tiny_policy_dir, kb, tmp_path, monkeypatch):
    real = evaluate.hf_backend

    def failing_backend(*args, **kwargs):
        backend = real(*args, **kwargs)
        generate, calls = backend.server.generate, []

        async def generate_until_third_episode(request_id, **kw):
            calls.append(request_id)
            if len(calls) >= 3:  # an episode takes at most 2 turns: the second or third episode fails
                raise RuntimeError("generation server died")
            return await generate(request_id, **kw)

        backend.server.generate = generate_until_third_episode
        return backend

    monkeypatch.setattr(evaluate, "hf_backend", failing_backend)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="server died"):
        evaluate.main(_argv(tiny_policy_dir("qwen2_5_vl"), kb, out, "--limit", "3", "--batch-size", "1"))
    episodes = (out / "episodes.jsonl").read_text().splitlines()
    metrics = _strict(out / "metrics.json")
    assert 1 <= len(episodes) < 3
    assert metrics["complete"] is False and metrics["all"]["num_episodes"] == len(episodes)
    assert len((out / "rollouts.jsonl").read_text().splitlines()) == len(episodes)


def test_docmemo_rows_have_no_kb_ceiling():
    row = {
        "extra_info": {
            "env_id": "DocMemo-v0",
            "env_kwargs": json.dumps({"store_root": "/x"}),
            "env_options": json.dumps({"question": "q", "doc_id": "d"}),
        }
    }
    assert gold_ranks(row) == ([], None)


def test_report_stream_replaces_nan_with_null(tmp_path):
    stream = ReportStream(tmp_path)
    written = stream.finish({"model": "m", "backend": "b", **summarize([])})  # a mean over no episodes
    assert written["all"]["accuracy"] is None
    assert _strict(tmp_path / "metrics.json")["all"]["accuracy"] is None
