"""Every step of a verl run lands whole in ``metrics.jsonl`` beside its checkpoints (the local engine's file):
verl's console line of a step, forwarded by Ray from the trainer's actor, can arrive split in two (CI saw a step
whose line lost its ``rollout_corr/*`` numbers, and whose second half, holding ``training/global_step:3 - ...``,
was read as the step). The file is written by ragym's trainer mixin around verl's loop, here a stand-in loop that
logs steps as verl's does; the real runs read it in ``tests/launch``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.replay_buffer import DAPO_FILTERED_REWARD_COUNTS_KEY

from ragym.rl.core.metrics import METRICS_FILE, append_metrics, read_metrics
from ragym.rl.verl_plugin.trainer import RagymTrainerMixin
from ragym.rl.verl_plugin.verl_local import console_step_metrics


class _Buffer:
    def take_val_episodes(self) -> list:
        return []


class _VerlLoop:
    """verl's v1 loop as the mixin sees it: the checkpoint's step loaded before ``fit``, an evaluation before
    training when the recipe asks, then each step's metrics computed and logged."""

    def __init__(self, out: Path, loaded_step: int, last_step: int, val_before_train: bool) -> None:
        self.config = OmegaConf.create(
            {"trainer": {"default_local_dir": str(out), "val_before_train": val_before_train}}
        )
        self.global_steps = loaded_step
        self.last_step = last_step
        self.replay_buffer = _Buffer()
        self.logged: list[tuple[int, dict]] = []

    def _validate(self) -> dict[str, float]:
        return {"val-core/score": 0.25}

    def _compute_metrics(
        self, batch: Any, metrics: dict, timing_raw: dict, global_steps: int, epoch: int
    ) -> None:
        metrics["critic/score/mean"] = np.float32(global_steps / 10)
        metrics[DAPO_FILTERED_REWARD_COUNTS_KEY] = {0.0: 2}

    def fit(self, agent_loop_manager: Any) -> None:
        if self.config.trainer.val_before_train:
            self.logged.append((self.global_steps, self._validate()))
        while self.global_steps < self.last_step:
            self.global_steps += 1
            metrics = {"actor/grad_norm": torch.tensor(0.5), "training/global_step": self.global_steps}
            self._compute_metrics(None, metrics, {}, global_steps=self.global_steps, epoch=0)
            # for verl's table of filtered groups, not the step's metrics
            metrics.pop(DAPO_FILTERED_REWARD_COUNTS_KEY)
            self.logged.append((self.global_steps, metrics))


class _Trainer(RagymTrainerMixin, _VerlLoop):
    def _add_ragym_metrics(self, batch: Any, metrics: dict, global_steps: int) -> None:
        # what the mixin really adds reads TransferQueue: one key stands in for it
        metrics["reward/total"] = float(metrics["critic/score/mean"])


def run(out: Path, loaded_step: int, last_step: int, val_before_train: bool = False) -> _Trainer:
    trainer = _Trainer(out, loaded_step, last_step, val_before_train)
    trainer.fit(None)
    return trainer


def test_each_step_is_one_row_with_every_number_verl_logs(tmp_path: Path) -> None:
    trainer = run(tmp_path, 0, 3)
    rows = read_metrics(tmp_path / METRICS_FILE)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row, (step, logged) in zip(rows, trainer.logged, strict=True):
        assert row["step"] == step and row.keys() - {"step"} == logged.keys()  # every key verl logs, no other
        assert row["actor/grad_norm"] == 0.5 and row["training/global_step"] == step
        assert row["critic/score/mean"] == pytest.approx(step / 10)
        assert row["reward/total"] == row["critic/score/mean"]


def test_a_resume_logs_again_the_steps_after_its_checkpoint_and_keeps_the_ones_before(tmp_path: Path) -> None:
    run(tmp_path, 0, 3)  # killed after logging step 3, its last checkpoint step 2
    run(tmp_path, 2, 4, val_before_train=True)
    rows = read_metrics(tmp_path / METRICS_FILE)
    # the resumed run's evaluation before training is logged at the loaded step, as verl logs it
    assert [(r["step"], "val-core/score" in r) for r in rows] == [
        (1, False),
        (2, False),
        (2, True),
        (3, False),
        (4, False),
    ]
    # a run from scratch in the same folder starts the file anew
    run(tmp_path, 0, 1, val_before_train=True)
    assert [r["step"] for r in read_metrics(tmp_path / METRICS_FILE)] == [0, 1]


def test_a_row_is_one_line_of_json_whatever_the_values(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    append_metrics(
        path, 7, {"a": np.int64(3), "b": torch.tensor(1.5), "c": float("nan"), "d": [1, 2], "e": Path("x")}
    )
    (line,) = path.read_text().splitlines()
    row = json.loads(line)
    assert row["step"] == 7 and row["a"] == 3 and row["b"] == 1.5 and row["d"] == [1, 2] and row["e"] == "x"
    assert row["c"] != row["c"]  # NaN, as the local engine writes it


def test_a_console_line_split_by_ray_never_stands_in_for_its_step() -> None:
    """The failure CI saw: Ray's log monitor read the trainer's step line while it was being written."""
    head = (
        "(TaskRunner pid=4242) step:3 - global_seqlen/min:20249.0 - rollout_corr/rollout_is_mean:0.99 - train"
    )
    tail = "(TaskRunner pid=4242) ing/global_step:3 - training/epoch:0.0 - critic/score/mean:0.1885"
    whole = "\x1b[36m(TaskRunner pid=4242)\x1b[0m step:2 - critic/score/mean:np.float64(0.25) - actor/grad_norm:0.5"
    steps = console_step_metrics(
        "\n".join([whole, "(TaskRunner pid=4242) Training Progress: 66%", head, tail])
    )
    assert steps[2] == {"critic/score/mean": 0.25, "actor/grad_norm": 0.5}
    # step 3 is its line's first part: the second part, though it holds "global_step:3 - ", is not read as step 3
    assert steps[3] == {"global_seqlen/min": 20249.0, "rollout_corr/rollout_is_mean": 0.99}
    # the trainer's own stdout, no Ray prefix
    assert console_step_metrics("step:1 - a:1.0") == {1: {"a": 1.0}}
