"""``ragym train``, ``ragym eval`` and ``ragym rollout`` run from a directory outside the repository on data
with one bad row of each kind (missing extra_info, invalid env_options JSON, a missing image, a truncated
parquet file): every bad row is listed with its file position and extra_info.index, the runs finish on the
valid rows, and a user error is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rl.data.bad_rows import truncated_copy, with_bad_rows

REPO = Path(__file__).resolve().parents[2]
TINY_TRAIN = [
    "trainer.total_training_steps=1",
    "trainer.logger=[console]",
    "data.train_batch_size=2",
    "data.val_max_samples=2",
    "data.max_response_length=48",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
]


def _ragym(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "ragym.rl.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_train_eval_rollout_outside_the_repository_on_bad_rows(tmp_path, capsys):
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.policy import build_tiny_policy

    kb = build_kb(tmp_path / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    policy = build_tiny_policy("qwen2_5_vl", tmp_path / "policy", seed=0)
    train = tmp_path / "data" / "train.parquet"
    positions = with_bad_rows(kb / "data" / "train.parquet", train, num_good=6)
    test = tmp_path / "data" / "test.parquet"
    with_bad_rows(kb / "data" / "test.parquet", test, num_good=3)
    torn = truncated_copy(kb / "data" / "test.parquet", tmp_path / "data" / "torn.parquet")
    work = tmp_path / "elsewhere"
    work.mkdir()

    run = _ragym(
        work,
        "train",
        "--recipe",
        "kbvqa_tiny_cpu",
        f"actor_rollout_ref.model.path={policy}",
        f"data.train_files=[{train},{torn}]",
        f"data.val_files={test}",
        f"trainer.default_local_dir={tmp_path / 'run'}",
        *TINY_TRAIN,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for k, (kind, position) in enumerate(positions.items()):
        index = None if kind == "missing_extra_info" else 1000 + k
        assert f"train.parquet row {position} (extra_info.index {index})" in run.stderr
    assert "torn.parquet is not a readable parquet file" in run.stderr
    assert (tmp_path / "run" / "global_step_1" / "engine_state.pt").is_file()

    out = tmp_path / "eval"
    run = _ragym(
        work,
        "eval",
        "--model",
        str(tmp_path / "run" / "global_step_1"),
        "--recipe",
        "kbvqa_tiny_cpu",
        "--data",
        str(test),
        "--data",
        str(torn),
        "--out",
        str(out),
        "--backend",
        "hf",
        "data.max_response_length=48",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["complete"] and metrics["all"]["num_episodes"] == 3 and len(metrics["bad_rows"]) == 4

    run = _ragym(work, "rollout", "--data", str(test), "--policy", "signature")
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["episodes"] == 3

    # User errors: one line saying what is wrong, non-zero exit; --debug shows the traceback.
    from ragym.rl.cli import main

    os.chdir(work)
    capsys.readouterr()  # what the fixtures printed
    try:
        for args in (
            ["rollout", "--data", str(torn)],
            ["eval", "--model", str(tmp_path / "absent"), "--data", str(test), "--out", str(out)],
            ["train", "--recipe", "no_such_recipe"],
        ):
            assert main(args) == 2
            errors = capsys.readouterr().err.strip().splitlines()
            assert len(errors) == 1 and errors[0].startswith(f"ragym {args[0]}: "), errors
        with pytest.raises(Exception, match="torn.parquet"):
            main(["--debug", "rollout", "--data", str(torn)])
    finally:
        os.chdir(REPO)
