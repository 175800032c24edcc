"""ragym's verl trainer mode: dynamic sampling's flat share from verl's eviction counts, and the guards."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from omegaconf import OmegaConf

from ragym.rl.guards import read_firings

REPO = Path(__file__).resolve().parents[3]


def test_step_logs_flat_share_and_a_stop_guard_ends_the_loop_after_the_step(tmp_path, caplog):
    from ragym.rl.verl_plugin.trainer import RagymTrainer

    config = OmegaConf.create({
        "algorithm": {"filter_groups": {"enable": True, "metric": "reward"}},
        "reward": {"custom_reward_function": {
            "reward_kwargs": {"recipe_path": str(REPO / "recipes/rewards/mmagent_r2.yaml")}}},
        "ragym": {"outcome_metric": "reward/outcome",
                  "guards": {"entropy_floor": {"action": "stop", "threshold": 0.1, "steps": 1}}},
        "trainer": {"default_local_dir": str(tmp_path)},
    })  # fmt: skip
    trainer = SimpleNamespace(config=config, total_training_steps=10)
    healthy = {"training/filter_groups/evicted_samples": 3, "actor/entropy": 0.5}
    with caplog.at_level(logging.WARNING):
        RagymTrainer._signal(trainer, 3, healthy, 4)
    assert "keys on the rubric total (format + outcome + verification)" in caplog.text
    assert healthy["dynamic_sampling/flat_group_share"] == 3 / 7  # 3 flat of 7 finished groups
    assert healthy["guard/entropy_floor"] == 0.0 and trainer.total_training_steps == 10
    collapsed = {"actor/entropy": 0.01}
    RagymTrainer._signal(trainer, 4, collapsed, 4)
    assert collapsed["dynamic_sampling/flat_group_share"] == 0.0
    assert collapsed["guard/entropy_floor"] == 1.0
    assert trainer.total_training_steps == 4  # verl's loop logs step 4, then ends
    assert [f["step"] for f in read_firings(tmp_path)] == [4]
