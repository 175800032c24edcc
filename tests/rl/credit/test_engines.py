"""Turn-level credit in both engines: a local-engine step and a verl recipe that select it by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

import ragym.rl.engine.trainer
from ragym.rl.credit import TURN_CREDIT, TurnCreditInputs
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import RECIPES_DIR
from ragym.rl.train import build_trainer
from tests.rl.engine_helpers import VARYING_REWARD

TURN_CREDIT_OVERRIDES = [f"algorithm.adv_estimator={TURN_CREDIT}", "+ragym.turn_credit.step_weight=0.5"]


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """A tiny policy and the demo KB's rows."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.policy import build_tiny_policy

    root = tmp_path_factory.mktemp("credit")
    kb = build_kb(root / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    return kb, build_tiny_policy("qwen2_5_vl", root / "policy", seed=0)


def test_local_engine_runs_a_step_with_turn_credit(tiny_setup, tmp_path, monkeypatch):
    kb, policy = tiny_setup
    overrides = [
        f"actor_rollout_ref.model.path={policy}",
        f"data.train_files={kb}/data/train.parquet",
        "data.val_files=null",
        f"trainer.default_local_dir={tmp_path}",
        "trainer.total_training_steps=1",
        "trainer.logger=[console]",
        "data.train_batch_size=2",
        "data.max_response_length=48",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        *TURN_CREDIT_OVERRIDES,
        # A reward that varies with a random policy (its only term has no step split).
        *VARYING_REWARD,
    ]
    seen: list[tuple[TurnCreditInputs, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    real = ragym.rl.engine.trainer.compute_advantages

    def spy(batch, algo_config, cfg, turn_credit=None):
        advantages = real(batch, algo_config, cfg, turn_credit)
        seen.append((turn_credit, batch.response_mask, batch.rewards, advantages))
        return advantages

    monkeypatch.setattr(ragym.rl.engine.trainer, "compute_advantages", spy)
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    assert trainer.turn_credit[1] == 0.5  # the recipe's step weight
    before = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    metrics = trainer.train_step()
    trainer.close()
    ((inputs, mask, rewards, advantages),) = seen
    assert isinstance(inputs, TurnCreditInputs) and len(inputs.turn_ids) == mask.shape[0] == 4
    for turn_ids, row in zip(inputs.turn_ids, mask, strict=True):  # row-aligned with the batch
        assert [t >= 0 for t in turn_ids] == [bool(m) for m in row[: len(turn_ids)]]
    assert inputs.step_rewards == [{}] * 4  # no term of this rubric has a step split
    # ... so turn credit is the paper's GRPO, token for token (the recipe keeps norm_adv_by_std_in_grpo).
    token_rewards = torch.zeros_like(mask)
    token_rewards[:, -1] = rewards
    index = np.array(["a", "a", "b", "b"], dtype=object)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index)
    assert torch.allclose(advantages, grpo) and bool(advantages.abs().sum() > 0)
    assert "reward/total" in metrics and "actor/pg_loss" in metrics
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


@pytest.mark.parametrize("recipe", ["kbvqa_qwen2_5_vl_7b.yaml", "r3g_qwen2_5_vl_7b.yaml"])
def test_a_verl_recipe_composes_with_turn_credit(recipe: str) -> None:
    config = check_recipe(RECIPES_DIR / recipe, TURN_CREDIT_OVERRIDES)
    assert config.algorithm.adv_estimator == TURN_CREDIT
    assert config.ragym.turn_credit.step_weight == 0.5


def test_a_misspelled_turn_credit_key_is_reported() -> None:
    with pytest.raises(ValueError, match="step_wieght"):
        check_recipe(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml", ["+ragym.turn_credit.step_wieght=0.5"])
