"""The verl v1 trainer mixin: verl's own advantage code computes turn credit from TransferQueue's fields."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.protocol import DataProto
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

import ragym.rl.verl_plugin.turn_credit
from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.rl.verl_plugin.turn_credit import TurnCreditMixin

BATCH = ["gold", "e2"]
TURN_IDS = [0, 0, -1, 1, 1]
MASK = [1, 1, 0, 1, 1]


def _extra_fields(decision: ev.Event | None) -> dict:
    events = [
        kbvqa_ev.task(1, ["gold"], max_rejections=1, candidates_per_batch=2, max_turns=4),
        kbvqa_ev.search_image(0, 1, 0, BATCH, "gold", 0),
        *([decision] if decision else []),
    ]
    return {
        "events": events,
        "turns": ["a", "b"],
        "env_id": "KBVQA-v0",
        "turn_ids": TURN_IDS,
        "truncated": False,
    }


class FakeVerlTrainer:
    """What verl 0.9.1's ``_compute_advantage`` does with the fields it reads (uid, mask, rm_scores)."""

    def __init__(self, config, uids: list[str], rewards: list[float]) -> None:
        self.config, self.uids, self.rewards = config, uids, rewards

    def _compute_advantage(self, batch, metrics):
        # verl's padding rows (``padding_utils``) have a zero response mask.
        mask = torch.tensor([[0] * 5 if uid == "pad" else MASK for uid in self.uids], dtype=torch.float32)
        scores = torch.zeros_like(mask)
        scores[:, -1] = torch.tensor(self.rewards)
        data = DataProto.from_dict(
            tensors={"token_level_rewards": scores, "response_mask": mask},
            non_tensors={"uid": np.array(self.uids, dtype=object)},
        )
        out = compute_advantage_for_multi_trajectories(
            data,
            batch_keys=batch.keys,
            adv_estimator=self.config.algorithm.adv_estimator,
            norm_adv_by_std_in_grpo=True,
            config=self.config.algorithm,
        )
        return out.batch["advantages"]


class Trainer(TurnCreditMixin, FakeVerlTrainer):
    """The mixin placed before the trainer class, as ``RagymTrainer`` would."""


def _config(estimator: str):
    return OmegaConf.create(
        {
            "algorithm": {"adv_estimator": estimator, "norm_adv_by_std_in_grpo": False, "gamma": 1.0},
            "reward": {
                "custom_reward_function": {
                    "reward_kwargs": {"recipe": {"terms": {"verification": {"weight": 1.0}}}}
                }
            },
            "ragym": {"turn_credit": {"step_weight": 0.5}},
        }
    )


def test_the_mixin_hands_verls_advantage_code_the_batch_turns(monkeypatch):
    rerank = kbvqa_ev.verification(1, "rerank", "gold", 1, 0, BATCH, "gold")  # rho 1
    reject = kbvqa_ev.verification(1, "reject", None, 1, 0, BATCH, "gold")  # gold was there: rho 0
    fields = [_extra_fields(rerank), _extra_fields(reject), _extra_fields(rerank), _extra_fields(None)]
    stored = {
        "extra_fields": fields,
        "data_source": ["synthetic_kbvqa"] * 4,
        "reward_model": [{"ground_truth": ["Paris"]}] * 4,
    }
    asked: list[list[str]] = []

    def kv_batch_get(keys, partition_id, select_fields):
        asked.append(list(select_fields))
        return {key: stored[key] for key in select_fields}

    monkeypatch.setattr(ragym.rl.verl_plugin.turn_credit, "tq", SimpleNamespace(kv_batch_get=kv_batch_get))
    uids = ["g", "g", "h", "pad"]
    trainer = Trainer(_config("turn_credit"), uids, rewards=[1.0, 0.0, 1.0, 0.0])
    batch = SimpleNamespace(keys=list("abcd"), partition_id="train", tags=[{}, {}, {}, {"is_padding": True}])
    advantages = trainer._compute_advantage(batch, {})
    # Group g: episode advantages +-0.5 (rewards 1, 0; no std). Turn 1 of both faced batch 0 of image 1: step
    # returns 1 and 0 -> step advantages +-1, times w = 0.5. Group h has one episode: verl's GRPO takes mean 0
    # there (advantage = reward 1.0) and its turn has no partner. The padding row: 0.
    expected = torch.tensor(
        [[0.5, 0.5, 0, 1.0, 1.0], [-0.5, -0.5, 0, -1.0, -1.0], [1, 1, 0, 1, 1], [0, 0, 0, 0, 0]]
    )
    assert torch.allclose(advantages, expected)
    assert asked == [ragym.rl.verl_plugin.turn_credit.FIELDS]


def test_other_estimators_pass_straight_through(monkeypatch):
    monkeypatch.setattr(ragym.rl.verl_plugin.turn_credit, "tq", None)  # nothing is read back
    trainer = Trainer(_config("grpo"), ["g", "g"], rewards=[1.0, 0.0])
    advantages = trainer._compute_advantage(SimpleNamespace(keys=["a_0_0", "b_1_0"], tags=[{}, {}]), {})
    assert advantages[0, 0] > 0 > advantages[1, 0]


def test_verls_trainer_without_the_mixin_gets_a_clear_error():
    trainer = FakeVerlTrainer(_config("turn_credit"), ["g", "g"], rewards=[1.0, 0.0])
    with pytest.raises(ValueError, match="trainer_mode: ragym"):
        trainer._compute_advantage(SimpleNamespace(keys=["a", "b"]), {})
