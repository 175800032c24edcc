"""Turn-level credit: estimator arithmetic on hand-made groups (expected values computed by hand below)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

from ragym.rl.credit import TURN_CREDIT, TurnCreditInputs, compute_turn_credit_advantage, turn_credit_batch

# Response layout of every episode below: turn 0 (2 tokens), 1 observation token, turn 1 (2 tokens).
MASK = [1, 1, 0, 1, 1]
TURN_IDS = [0, 0, -1, 1, 1]


def _tensors(rewards: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.tensor([MASK] * len(rewards), dtype=torch.float32)
    token_rewards = torch.zeros_like(mask)
    token_rewards[:, -1] = torch.tensor(rewards)
    return token_rewards, mask


def _config(norm: bool = False, gamma: float = 1.0) -> AlgoConfig:
    return AlgoConfig(adv_estimator=TURN_CREDIT, norm_adv_by_std_in_grpo=norm, gamma=gamma)


def _run(rewards, index, steps, anchors, weight=1.0, config=None) -> torch.Tensor:
    token_rewards, mask = _tensors(rewards)
    inputs = TurnCreditInputs([TURN_IDS] * len(rewards), steps, anchors, weight)
    adv, returns = compute_turn_credit_advantage(
        token_level_rewards=token_rewards,
        response_mask=mask,
        index=np.array(index, dtype=object),
        config=config or _config(),
        turn_credit=inputs,
    )
    assert torch.equal(adv, returns)
    return adv


def test_registered_with_verl() -> None:
    assert core_algos.get_adv_estimator_fn(TURN_CREDIT) is compute_turn_credit_advantage


def test_step_advantage_among_turns_that_faced_the_same_anchor() -> None:
    # One group of three episodes, rewards 1, 0, 0 -> Dr. GRPO episode advantages 2/3, -1/3, -1/3.
    # Turn 1 faced anchor "b" in episodes 0 and 1 (step rewards 1.0 and 0.2) and "c" in episode 2.
    steps = [{1: 1.0}, {1: 0.2}, {1: 0.5}]
    anchors = [{1: "b"}, {1: "b"}, {1: "c"}]
    adv = _run([1.0, 0.0, 0.0], ["g"] * 3, steps, anchors)
    # Episode 0, turn 1: 2/3 + (1.0 - 0.2) = 1.4667; turn 0 (no anchor): 2/3.
    # Episode 1, turn 1: -1/3 + (0.2 - 1.0) = -1.1333. Episode 2: "c" has no partner -> -1/3 everywhere.
    expected = torch.tensor(
        [
            [2 / 3, 2 / 3, 0, 2 / 3 + 0.8, 2 / 3 + 0.8],
            [-1 / 3, -1 / 3, 0, -1 / 3 - 0.8, -1 / 3 - 0.8],
            [-1 / 3, -1 / 3, 0, -1 / 3, -1 / 3],
        ]
    )
    assert torch.allclose(adv, expected, atol=1e-5)


def test_step_return_discounts_later_step_rewards_and_baseline_is_the_partners_mean() -> None:
    # Anchor "a" at turn 0 of all three episodes (a hand-made anchor; real envs leave turn 0 out).
    # Step returns with gamma 0.5: G0 = r0 + 0.5 r1 -> 1 + 0.5 * 2 = 2.0, 0 + 0.5 * 1 = 0.5, 1.0.
    steps = [{0: 1.0, 1: 2.0}, {1: 1.0}, {0: 1.0}]
    anchors = [{0: "a"}, {0: "a"}, {0: "a"}]
    adv = _run([0.0, 0.0, 0.0], ["g"] * 3, steps, anchors, weight=0.5, config=_config(gamma=0.5))
    # Leave-one-out baselines: (0.5 + 1.0) / 2 = 0.75, (2.0 + 1.0) / 2 = 1.5, (2.0 + 0.5) / 2 = 1.25.
    # Step advantages 1.25, -1.0, -0.25, times w = 0.5; episode advantages are 0 (equal rewards).
    assert torch.allclose(adv[:, 0], torch.tensor([0.625, -0.5, -0.125]))
    assert torch.equal(adv[:, 3], torch.zeros(3))  # turn 1 has no anchor: episode advantage only (0)


def test_turns_without_an_anchor_partner_get_only_the_episode_advantage() -> None:
    token_rewards, mask = _tensors([1.0, 0.0, 0.5, 0.5])
    index = np.array(["g", "g", "h", "h"], dtype=object)
    plain, _ = core_algos.compute_grpo_outcome_advantage(
        token_rewards, mask, index, norm_adv_by_std_in_grpo=True
    )
    # Same anchor string in two different groups, and one anchor in each group: no partner anywhere.
    steps = [{1: 1.0}, {}, {1: 3.0}, {}]
    anchors = [{1: "x"}, {}, {1: "x"}, {0: "y"}]
    adv = _run([1.0, 0.0, 0.5, 0.5], list(index), steps, anchors, config=_config(norm=True))
    assert torch.allclose(adv, plain)


def test_two_turns_of_one_episode_at_one_anchor_are_not_each_others_baseline() -> None:
    # Episode 0 faces "a" twice; episode 1 never: the baseline may only come from other episodes.
    steps = [{0: 1.0, 1: 1.0}, {0: 5.0}]
    anchors = [{0: "a", 1: "a"}, {}]
    adv = _run([0.0, 0.0], ["g", "g"], steps, anchors)
    assert torch.equal(adv, torch.zeros_like(adv))


def test_observation_and_padding_tokens_get_no_advantage() -> None:
    steps, anchors = [{1: 1.0}, {1: 0.0}], [{1: "b"}, {1: "b"}]
    adv = _run([1.0, 0.0], ["g", "g"], steps, anchors)
    assert torch.equal(adv[:, 2], torch.zeros(2))
    assert bool((adv[:, [0, 1, 3, 4]] != 0).all())


def test_context_inputs_equal_explicit_inputs_and_missing_inputs_are_an_error() -> None:
    token_rewards, mask = _tensors([1.0, 0.0])
    index = np.array(["g", "g"], dtype=object)
    inputs = TurnCreditInputs([TURN_IDS] * 2, [{1: 1.0}, {1: 0.0}], [{1: "b"}, {1: "b"}])
    explicit, _ = compute_turn_credit_advantage(token_rewards, mask, index, _config(), turn_credit=inputs)
    with turn_credit_batch(inputs):
        # verl's ray_trainer.compute_advantage passes exactly these arguments to a registered estimator.
        implicit, _ = core_algos.get_adv_estimator_fn(TURN_CREDIT)(
            token_level_rewards=token_rewards, response_mask=mask, config=_config(), index=index
        )
    assert torch.equal(explicit, implicit)
    with pytest.raises(ValueError, match="trainer_mode: ragym"):
        compute_turn_credit_advantage(token_rewards, mask, index, _config())


def test_generated_token_without_a_turn_id_is_an_error() -> None:
    token_rewards, mask = _tensors([1.0, 0.0])
    inputs = TurnCreditInputs([[0, 0, -1, -1, -1], TURN_IDS], [{}, {}], [{}, {}])
    with pytest.raises(ValueError, match="episode 0 has generated tokens"):
        compute_turn_credit_advantage(
            token_rewards, mask, np.array(["g", "g"]), _config(), turn_credit=inputs
        )
