"""The local engine end to end on a tiny policy: metrics, unused keys, checkpoints, kill and resume."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ragym.rl.core.metrics import read_metrics
from ragym.rl.engine.trainer import LATEST, RowOrder, latest_checkpoint
from ragym.rl.models import load_policy
from ragym.rl.train import build_trainer
from tests.rl.engine_helpers import VARYING_REWARD

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """A tiny policy and the demo KB's rows (built once for the module)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.policy import build_tiny_policy

    root = tmp_path_factory.mktemp("engine")
    kb = build_kb(root / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    policy = build_tiny_policy("qwen2_5_vl", root / "policy", seed=0)
    return kb, policy


def _overrides(tiny_setup, out: Path, steps: int) -> list[str]:
    kb, policy = tiny_setup
    return [
        f"actor_rollout_ref.model.path={policy}",
        f"data.train_files={kb}/data/train.parquet",
        f"data.val_files={kb}/data/test.parquet",
        f"trainer.default_local_dir={out}",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        "trainer.logger=[console]",
        "data.train_batch_size=2",
        "data.val_max_samples=2",
        "data.max_response_length=48",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        # Set to a non-default value the local engine never reads: it must be listed in the log.
        "critic.ppo_epochs=3",
        *VARYING_REWARD,
    ]


def test_train_writes_metrics_checkpoints_and_lists_unused_keys(tiny_setup, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ragym.rl.train"):
        trainer = build_trainer("kbvqa_tiny_cpu", _overrides(tiny_setup, tmp_path, steps=2))
    unused = " ".join(r.getMessage() for r in caplog.records if "does not use" in r.getMessage())
    assert "critic.ppo_epochs" in unused
    assert "actor_rollout_ref.actor.optim.lr" not in unused  # read by the engine
    before = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.fit()
    trainer.close()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert {"reward/total", "reward/length", "grpo/zero_adv_group_share", "actor/entropy"} <= set(record)
        assert len(record["rows"]) == 2
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "global_step_2"
    saved = load_policy(ckpt)[0].state_dict()
    state = trainer.model.state_dict()
    assert saved.keys() == state.keys() and all(torch.equal(saved[k], state[k]) for k in saved)
    assert any(not torch.equal(before[k], state[k]) for k in state)  # the update moved the policy


def test_checkpoint_round_trip_restores_model_optimizer_and_cursor(tiny_setup, tmp_path):
    trainer = build_trainer("kbvqa_tiny_cpu", _overrides(tiny_setup, tmp_path, steps=1))
    trainer.fit()
    state = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    optim_state = trainer.optimizer.state_dict()["state"]
    cursor, rng = trainer.order.state(), trainer.server.generator.get_state()
    trainer.close()
    resumed = build_trainer("kbvqa_tiny_cpu", _overrides(tiny_setup, tmp_path, steps=1))
    assert resumed.step == 1 and resumed.order.state() == cursor
    assert torch.equal(resumed.server.generator.get_state(), rng)
    assert all(torch.equal(state[k], v) for k, v in resumed.model.state_dict().items())
    loaded = resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(optim_state[i]["exp_avg"], loaded[i]["exp_avg"]) for i in optim_state)
    resumed.close()


def test_killed_run_resumes_with_the_same_data_order(tiny_setup, tmp_path):
    overrides = _overrides(tiny_setup, tmp_path, steps=4)
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "ragym.rl.cli", "train", "--recipe", "kbvqa_tiny_cpu", *overrides]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # A hang guard, not a speed check: the run takes about 30 s on an idle CI box and minutes on a loaded one.
    marker, deadline = tmp_path / LATEST, time.monotonic() + 900
    while not (marker.exists() and int(marker.read_text()) >= 2) and proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the run never reached its second checkpoint in 900 s")
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert marker.exists(), f"the run exited ({proc.returncode}) before its first checkpoint"
    killed_at = int(marker.read_text())
    assert killed_at < 4, "the run finished before it could be killed"
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from" in done.stderr
    last_per_step = {r["step"]: r["rows"] for r in read_metrics(tmp_path / "metrics.jsonl") if "rows" in r}
    order = RowOrder(len(_train_rows(tiny_setup)), 2, seed=0, shuffle=True)
    assert last_per_step == {step: order.next_batch() for step in range(1, 5)}
    assert int(marker.read_text()) == 4


def _train_rows(tiny_setup) -> list:
    import pandas as pd

    return pd.read_parquet(f"{tiny_setup[0]}/data/train.parquet").to_dict(orient="records")


def test_unknown_logger_is_an_error(tiny_setup, tmp_path):
    overrides = [*_overrides(tiny_setup, tmp_path, steps=1), "trainer.logger=[console,tensorboard]"]
    with pytest.raises(ValueError, match="tensorboard"):
        build_trainer("kbvqa_tiny_cpu", overrides)


def test_full_determinism_recipes_run_with_per_episode_request_ids(tiny_setup, tmp_path):
    """verl's agent loop builds request ids from each episode's ``priority`` under ``full_determinism``; the
    local engine gives every episode of a step its own."""
    overrides = [
        *_overrides(tiny_setup, tmp_path, steps=1),
        "actor_rollout_ref.rollout.full_determinism=true",
    ]
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    seen: list[str] = []
    generate = trainer.server.generate

    async def recording(request_id, **kwargs):
        seen.append(request_id)
        return await generate(request_id, **kwargs)

    trainer.server.generate = recording
    trainer.train_step()
    trainer.close()
    assert set(seen) == {f"det-{i}" for i in range(4)}  # 2 rows x n=2 episodes, each with its own id


def test_same_seed_same_run_under_full_determinism(tiny_setup, tmp_path):
    """Two runs of one recipe and seed sample the same episodes and make the same update."""

    def one(out: Path) -> tuple[list, dict]:
        overrides = [
            *_overrides(tiny_setup, out, steps=2),
            "actor_rollout_ref.rollout.full_determinism=true",
            "data.max_response_length=256",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
        ]
        trainer = build_trainer("kbvqa_tiny_cpu", overrides)
        metrics = [trainer.train_step() for _ in range(2)]
        state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        trainer.close()
        keys = ("reward/total", "episode/response_length", "actor/grad_norm", "actor/entropy")
        return [[m[k] for k in keys] for m in metrics], state

    first, state = one(tmp_path / "a")
    second, other = one(tmp_path / "b")
    assert first == second
    assert all(torch.equal(state[k], other[k]) for k in state)
