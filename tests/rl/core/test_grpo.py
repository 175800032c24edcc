"""GRPO pieces against verl's core_algos, and the masking invariant of the update."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos
from verl.utils.config import omega_conf_to_dataclass

from ragym.rl.core.grpo import (
    Sample,
    UpdateConfig,
    accumulate_gradients,
    assemble,
    compute_advantages,
    response_log_probs,
    update_policy,
)
from ragym.rl.core.vision import ImageInputs
from ragym.rl.engine.config import verl_defaults
from tests.rl.engine_helpers import build_model, image_processor


def _cfg(**overrides) -> UpdateConfig:
    base = dict(
        mini_batch_size=4,
        micro_batch_size=4,
        log_prob_micro_batch_size=2,
        ppo_epochs=1,
        shuffle=False,
        temperature=1.0,
        grad_clip=1.0,
        entropy_coeff=0.0,
        adv_estimator="grpo",
        norm_adv_by_std=True,
    )
    return UpdateConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def actor_config():
    actor = verl_defaults().actor_rollout_ref.actor
    actor = OmegaConf.merge(actor, {"ppo_micro_batch_size_per_gpu": 1, "ppo_mini_batch_size": 1})
    return omega_conf_to_dataclass(actor)


def _samples(rewards: list[float], uids: list[str], seed: int = 0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    samples = []
    for reward, uid in zip(rewards, uids, strict=True):
        n = int(rng.integers(6, 10))
        mask = [1, 1, 0, 0] + [int(b) for b in rng.integers(0, 2, n - 5)] + [1]  # context in the middle
        samples.append(
            Sample(list(rng.integers(20, 300, 6)), list(rng.integers(20, 300, n)), mask, [], reward, uid)
        )
    return samples


@pytest.mark.parametrize("norm", [True, False])
def test_advantages_are_group_normalised_outcome_rewards(norm):
    rewards, uids = [1.0, 0.0, 3.0, 0.5, 0.5, 2.0], ["a", "a", "a", "b", "b", "c"]
    batch = assemble(_samples(rewards, uids))
    advantages = compute_advantages(batch, AlgoConfig(), _cfg(norm_adv_by_std=norm))
    for i, (reward, uid) in enumerate(zip(rewards, uids, strict=True)):
        group = torch.tensor([r for r, u in zip(rewards, uids, strict=True) if u == uid])
        if len(group) == 1:
            expected = reward  # verl: a lone episode keeps its raw score (mean 0, std 1)
        else:
            expected = (reward - group.mean()) / ((group.std() + 1e-6) if norm else 1.0)
        row = advantages[i][batch.response_mask[i].bool()]
        assert torch.allclose(row, torch.full_like(row, float(expected)), atol=1e-5)
        assert (advantages[i][~batch.response_mask[i].bool()] == 0).all()


def test_micro_batched_loss_equals_verl_policy_loss_on_the_whole_batch(actor_config):
    model = build_model()
    samples = _samples([1.0, 0.0, 2.0, 0.0], ["a", "a", "b", "b"])
    batch = assemble(samples)
    compute_advantages(batch, AlgoConfig(), _cfg())
    grads = []
    for micro in (1, 4):
        model.zero_grad(set_to_none=True)
        stats = accumulate_gradients(
            model,
            ImageInputs(image_processor()),
            batch,
            [0, 1, 2, 3],
            actor_config,
            _cfg(micro_batch_size=micro),
            single_pass=True,
        )
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        # On-policy first step: ratio 1, so verl's clipped loss is -token-mean(advantage).
        log_prob = torch.zeros_like(batch.response_mask)
        expected, *_ = core_algos.compute_policy_loss(
            log_prob,
            log_prob,
            batch.advantages,
            batch.response_mask,
            cliprange=0.2,
            loss_agg_mode="token-mean",
        )
        assert stats["actor/pg_loss"] == pytest.approx(float(expected), abs=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert grads[0].abs().sum() > 0


def test_observation_tokens_carry_no_gradient(actor_config):
    """Changing mask-0 tokens after the last generated token changes nothing in the gradient."""
    model = build_model()
    base = _samples([1.0, 0.0], ["a", "a"], seed=3)
    variants = ([21, 22, 23], [40, 41, 42])
    grads = []
    for obs in variants:
        samples = [
            Sample(s.prompt_ids, s.response_ids + obs, s.response_mask + [0] * len(obs), [], s.reward, s.uid)
            for s in base
        ]
        batch = assemble(samples)
        compute_advantages(batch, AlgoConfig(), _cfg())
        model.zero_grad(set_to_none=True)
        accumulate_gradients(model, ImageInputs(image_processor()), batch, [0, 1], actor_config, _cfg(), True)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert grads[0].abs().sum() > 0
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize(("mini", "micro"), [(4, 1), (2, 1), (4, 3)])
def test_entropy_metric_is_verls_over_the_step_batch_before_the_update(actor_config, mini, micro):
    """verl logs ``actor/entropy`` as ``agg_loss`` of the policy's entropies before the update over the whole batch
    (token-mean: the mean over generated tokens); a mean of micro-batch means weighs a short response's tokens more.
    """
    model = build_model()
    inputs = ImageInputs(image_processor())
    samples = _samples([1.0, 0.0, 0.5, 0.0], ["a", "a", "b", "b"], seed=5)
    batch = assemble(samples)
    compute_advantages(batch, AlgoConfig(), _cfg())
    temperature = 0.05  # the tiny model's logits are near uniform: sharpened, responses differ in entropy
    with torch.no_grad():
        _, entropy = response_log_probs(
            model, inputs, samples, batch.response_mask.shape[1], temperature, True
        )
    assert entropy is not None
    expected = core_algos.agg_loss(entropy, batch.response_mask, "token-mean")
    cfg = _cfg(mini_batch_size=mini, micro_batch_size=micro, temperature=temperature)
    metrics = update_policy(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        inputs,
        batch,
        actor_config,
        cfg,
        torch.Generator(),
    )
    assert metrics["actor/entropy"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-sum"])
def test_clip_and_kl_metrics_are_verls_plain_mean_over_micro_batches(loss_agg_mode):
    """verl's policy loss logs ``actor/pg_clipfrac`` and ``actor/ppo_kl`` per micro-batch as a token mean (whatever
    ``loss_agg_mode``), and its actor averages the micro-batch values plainly (``AggregationType.MEAN``); a mean
    weighted by each micro-batch's episodes is another number once the micro-batches differ in size (2 + 1 here).
    """
    actor = verl_defaults().actor_rollout_ref.actor
    overrides = {"ppo_micro_batch_size_per_gpu": 1, "ppo_mini_batch_size": 1, "loss_agg_mode": loss_agg_mode}
    actor_config = omega_conf_to_dataclass(OmegaConf.merge(actor, overrides))
    model = build_model()
    inputs = ImageInputs(image_processor())
    samples = _samples([1.0, 0.0, 0.5, 0.0], ["a", "a", "b", "b"], seed=7)
    batch = assemble(samples)
    compute_advantages(batch, AlgoConfig(), _cfg())
    length = batch.response_mask.shape[1]
    # Old log-probs off the current ones by up to 0.5 nats: some ratios leave verl's clip range [0.8, 1.2].
    with torch.no_grad():
        log_prob, _ = response_log_probs(model, inputs, samples, length, 1.0)
    noise = torch.rand(log_prob.shape, generator=torch.Generator().manual_seed(0)) - 0.5  # [N, R]
    batch.old_log_prob = log_prob + noise
    mini, micros = [0, 1, 2], [[0, 1], [2]]
    clipfrac, kl = [], []
    for micro in micros:  # verl's compute_policy_loss_vanilla, by hand, on one micro-batch
        with torch.no_grad():
            current, _ = response_log_probs(model, inputs, [samples[i] for i in micro], length, 1.0)
        mask, advantages = batch.response_mask[micro], batch.advantages[micro]
        log_ratio = (current - batch.old_log_prob[micro]).clamp(-20.0, 20.0)
        ratio = log_ratio.exp()
        clipped = -advantages * ratio.clamp(0.8, 1.2) > -advantages * ratio
        clipfrac.append(float((clipped * mask).sum() / mask.sum()))
        kl.append(float((-log_ratio * mask).sum() / mask.sum()))
    stats = accumulate_gradients(
        model, inputs, batch, mini, actor_config, _cfg(micro_batch_size=2), single_pass=False
    )
    for key, values in (("actor/pg_clipfrac", clipfrac), ("actor/ppo_kl", kl)):
        weighted = (2 * values[0] + values[1]) / 3  # by episodes: the number verl does not log
        assert abs(weighted - np.mean(values)) > 1e-3  # the two definitions differ on this batch
        assert stats[key] == pytest.approx(float(np.mean(values)), abs=1e-6)


@pytest.mark.parametrize(
    ("mini", "micro", "epochs", "shuffle"),
    [(4, 2, 1, False), (2, 1, 1, False), (4, 4, 2, True)],  # one pass; two mini-batches; two PPO epochs
)
def test_update_step_is_finite_and_moves_parameters(actor_config, mini, micro, epochs, shuffle):
    model = build_model()
    before = [p.detach().clone() for p in model.parameters()]
    batch = assemble(_samples([1.0, 0.0, 0.5, 0.0], ["a", "a", "b", "b"]))
    compute_advantages(batch, AlgoConfig(), _cfg())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = update_policy(
        model,
        optimizer,
        ImageInputs(image_processor()),
        batch,
        actor_config,
        _cfg(mini_batch_size=mini, micro_batch_size=micro, ppo_epochs=epochs, shuffle=shuffle),
        torch.Generator().manual_seed(0),
    )
    assert all(np.isfinite(v) for v in stats.values())
    if (mini, epochs) != (4, 1):  # later mini-batches/epochs are off-policy: old log-probs were recomputed
        assert batch.old_log_prob is not None and batch.old_log_prob.shape == batch.response_mask.shape
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_update_raises_the_likelihood_of_the_better_response_in_each_group(actor_config):
    """Two prompts, two responses each (same context, one differing decision token); the rewarded one gains."""

    model = build_model()
    inputs = ImageInputs(image_processor())
    prompts = [[211, 212, 213, 214], [221, 222, 223, 224]]  # ordinary text tokens (no vision specials)
    good, bad = [240, 241], [240, 242]  # the responses differ in their last (decision) token
    samples = [
        Sample(p, list(r), [1, 1], [], reward, str(g))
        for g, p in enumerate(prompts)
        for r, reward in ((good, 1.0), (bad, 0.0))
    ]

    def margin() -> float:  # log p(good) - log p(bad), summed over both prompts
        with torch.no_grad():
            logp = [float(response_log_probs(model, inputs, [s], 2, 1.0)[0].sum()) for s in samples]
        return (logp[0] - logp[1]) + (logp[2] - logp[3])

    start = margin()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        batch = assemble(samples)
        compute_advantages(batch, AlgoConfig(), _cfg())
        update_policy(model, optimizer, inputs, batch, actor_config, _cfg(), torch.Generator().manual_seed(0))
    assert margin() > start + 0.1


@pytest.mark.parametrize("value", ["null", "0", "true"])
def test_a_recipe_without_a_micro_batch_count_is_refused_naming_the_key(value: str) -> None:
    """The cluster recipes pack micro-batches by tokens (verl's use_dynamic_bsz) and leave the count unset; the
    local engine splits by count, so it says which key to set instead of failing mid-update."""
    from ragym.rl.engine.config import RecipeReader, read_engine_config
    from ragym.rl.errors import UsageError
    from ragym.rl.recipe.compose import load_recipe

    config = load_recipe("kbvqa_tiny_cpu", [f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={value}"])
    with pytest.raises(UsageError, match=r"ppo_micro_batch_size_per_gpu must be a positive integer"):
        read_engine_config(RecipeReader(config))
