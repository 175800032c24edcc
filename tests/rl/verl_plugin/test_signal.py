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

    config = OmegaConf.create(
        {
            "algorithm": {"filter_groups": {"enable": True, "metric": "reward"}},
            "reward": {
                "custom_reward_function": {
                    "reward_kwargs": {"recipe_path": str(REPO / "recipes/rewards/mmagent_r2.yaml")}
                }
            },
            "ragym": {
                "outcome_metric": "reward/outcome",
                "guards": {"entropy_floor": {"action": "stop", "threshold": 0.1, "steps": 1}},
            },
            "trainer": {"default_local_dir": str(tmp_path)},
        }
    )
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


def evaluation(ident: float, reject: float, rerank: float) -> dict:
    """A held-out trajectory as verl stores it: the reward's result and the env's episode metrics."""
    return {
        "reward_extra_info": {"score": ident, "reward/outcome": ident},
        "episode_metrics": {"ident_acc": ident, "actions/reject": reject, "actions/rerank": rerank},
    }


def test_a_guard_on_held_out_metrics_reads_verls_evaluations_and_counts_them(tmp_path, monkeypatch):
    """Under verl's loop, evaluations land in the metrics of the steps that run them (``trainer.test_freq``): a
    ``val/`` guard is checked at those steps only, two evaluations below the floor in a row fire it (however many
    training steps lie between), and it stops the run after that step."""
    from verl.trainer.ppo.v1 import trainer_base

    from ragym.rl.verl_plugin.trainer import RagymTrainer

    config = OmegaConf.create(
        {
            "ragym": {
                "guards": {
                    "val_ident_floor": {"action": "stop", "threshold": 0.5, "steps": 2},
                    "val_reject_all": {"action": "warn", "steps": 1},
                }
            },
            "trainer": {"default_local_dir": str(tmp_path)},
        }
    )
    trainer = RagymTrainer.__new__(
        RagymTrainer
    )  # verl's __init__ starts workers: only the per-step code runs
    trainer.config, trainer.total_training_steps = config, 10
    episodes = []
    trainer.replay_buffer = SimpleNamespace(take_val_episodes=lambda: [episodes.pop(0), episodes.pop(0)])
    monkeypatch.setattr(
        trainer_base.PPOTrainer, "_validate", lambda self: {"val-core/kbvqa/reward/mean@1": 0.0}
    )
    training = {"actor/entropy": 0.5}
    # Evaluations at steps 2, 4 and 6; identification below the floor at 4 and 6, every decision a Reject at 6.
    held_out = {2: (0.9, 0.0, 1.0), 4: (0.2, 0.5, 1.0), 6: (0.0, 3.0, 0.0)}
    fired = {}
    for step in range(1, 7):
        metrics = dict(training)
        if step in held_out:
            ident, reject, rerank = held_out[step]
            episodes += [("u1", evaluation(ident, reject, rerank)), ("u2", evaluation(ident, reject, rerank))]
            metrics.update(RagymTrainer._validate(trainer))
        RagymTrainer._signal(trainer, step, metrics, 2)
        fired[step] = {k: v for k, v in metrics.items() if k.startswith("guard/val_")}
    assert fired[1] == fired[3] == fired[5] == {}  # no evaluation: the val guards are not checked
    assert fired[2] == {"guard/val_ident_floor": 0.0, "guard/val_reject_all": 0.0}
    assert fired[4] == {"guard/val_ident_floor": 0.0, "guard/val_reject_all": 0.0}  # 1 of 2 evaluations
    assert fired[6] == {"guard/val_ident_floor": 1.0, "guard/val_reject_all": 1.0}
    assert trainer.total_training_steps == 6
    (stop,) = [f for f in read_firings(tmp_path) if f["action"] == "stop"]
    assert stop["message"] == (
        "guard val_ident_floor fired at step 6: val/episode/ident_acc < 0.5 for 2 evaluations "
        "(0.200, 0.000) (action: stop)"
    )


def test_an_evaluation_above_the_floor_fires_nothing(tmp_path, monkeypatch):
    from verl.trainer.ppo.v1 import trainer_base

    from ragym.rl.verl_plugin.trainer import RagymTrainer

    config = OmegaConf.create(
        {
            "ragym": {
                "guards": {
                    "val_ident_floor": {"action": "stop", "threshold": 0.5, "steps": 1},
                    "val_reject_all": {"action": "stop", "steps": 1},
                }
            },
            "trainer": {"default_local_dir": str(tmp_path)},
        }
    )
    trainer = RagymTrainer.__new__(RagymTrainer)
    trainer.config, trainer.total_training_steps = config, 10
    trainer.replay_buffer = SimpleNamespace(
        take_val_episodes=lambda: [("u1", evaluation(1.0, 0.5, 1.0)), ("u2", evaluation(0.5, 1.0, 1.0))]
    )
    monkeypatch.setattr(
        trainer_base.PPOTrainer, "_validate", lambda self: {"val-core/kbvqa/reward/mean@1": 0.0}
    )
    metrics = {"actor/entropy": 0.5, **RagymTrainer._validate(trainer)}
    assert metrics["val/episode/ident_acc"] == 0.75 and metrics["val/reward/outcome"] == 0.75
    RagymTrainer._signal(trainer, 3, metrics, 2)
    assert metrics["guard/val_ident_floor"] == metrics["guard/val_reject_all"] == 0.0
    assert trainer.total_training_steps == 10 and read_firings(tmp_path) == []
