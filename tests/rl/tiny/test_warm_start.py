"""``imitate``: per-sample branch probabilities as soft targets, and the optional linear learning-rate decay."""

from __future__ import annotations

import pytest
import torch

from ragym.rl.core.grpo import Sample
from ragym.rl.tiny import warm_start as warm_start
from ragym.rl.tiny.warm_start import WarmStartConfig, imitate


class TwoTokenPolicy(torch.nn.Module):
    """A policy over two tokens (0 and 1) that ignores its context: one learnable logit pair."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(2))

    def p1(self) -> float:
        return float(torch.softmax(self.logits.detach(), -1)[1])


@pytest.fixture(autouse=True)
def fake_log_probs(monkeypatch: pytest.MonkeyPatch) -> None:
    def log_probs(model, image_inputs, samples, length, temperature):
        picked = torch.log_softmax(model.logits, -1)[torch.tensor(samples[0].response_ids)]
        return picked[None, :length], None

    monkeypatch.setattr(warm_start, "response_log_probs", log_probs)


def sample(token: int) -> Sample:
    return Sample([5], [token], [1], [], 0.0, "0")


def config(**fields) -> WarmStartConfig:
    base = dict(
        num_episodes=2,
        noise=0.0,
        reject_noise=0.0,
        protocol_share=0.0,
        decision_weight=1.0,
        epochs=1,
        batch_size=1,
        lr=0.01,
        seed=0,
    )
    return WarmStartConfig(**{**base, **fields})


def test_branch_probabilities_are_soft_targets_even_one_episode_per_batch() -> None:
    """Branches a=1 (0.65) and a=0 (0.35), each alone in its batch: the policy ends at P(1) ~0.65, not 50/50."""
    policy = TwoTokenPolicy()
    epochs = [[(sample(1), 1.0, 0.65), (sample(0), 1.0, 0.35)]] * 400
    imitate(policy, None, epochs, config(lr=0.05, lr_decay=True))
    assert policy.p1() == pytest.approx(0.65, abs=0.04)
    unweighted = TwoTokenPolicy()
    imitate(unweighted, None, [[(sample(1), 1.0), (sample(0), 1.0)]] * 400, config(lr=0.05, lr_decay=True))
    assert unweighted.p1() == pytest.approx(0.5, abs=0.04)


def test_linear_decay_halves_the_distance_travelled_on_a_steady_target() -> None:
    """Adam takes ~lr-sized steps towards a fixed target; decayed linearly to 0 it covers about half the way."""
    moved = {}
    for decay in (False, True):
        policy = TwoTokenPolicy()
        imitate(policy, None, [[(sample(1), 1.0)] * 20], config(lr_decay=decay))
        moved[decay] = float((policy.logits[1] - policy.logits[0]).detach())
    assert moved[False] > 0.3
    assert 0.4 < moved[True] / moved[False] < 0.65
