"""The off-policy correction: truncated importance weights and their metrics against hand-derived values, the same
definitions as verl's, the one switch resolved for every shipped recipe, and the local engine's loss weighted."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from omegaconf import OmegaConf

from ragym.rl.correction import (
    CLIPPED_SHARE,
    MISMATCH_KL,
    RATIO_P50,
    RATIO_P99,
    correction_metrics,
    truncated_weights,
)
from ragym.rl.off_policy import correction_level, correction_problems

LN3, LN2 = math.log(3.0), math.log(2.0)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
"""Response 0: three generated tokens, then padding; response 1: a generated token, an observation token, one more."""


def shifted() -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's log-probs, and the rollout's shifted by a known amount: response 0's generated tokens by -ln 3
    (ratio pi_trainer / pi_rollout = 3, over the bound 2), response 1's by +ln 2 (ratio 1/2), and the tokens off the
    mask by 40 nats (they must count nowhere)."""
    old = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.5], [0.5, 0.5, 0.25, 0.5]]))
    shift = torch.tensor([[LN3, LN3, LN3, -40.0], [-LN2, 40.0, -LN2, 40.0]])
    return old, old - shift


def test_token_level_weights_and_metrics_by_hand():
    old, rollout = shifted()
    weights = truncated_weights(old, rollout, MASK, "token", 2.0)
    # Ratio 3 truncated to 2 on response 0; 1/2 kept on response 1; 0 off the mask.
    assert torch.allclose(weights, torch.tensor([[2.0, 2.0, 2.0, 0.0], [0.5, 0.0, 0.5, 0.0]]))
    metrics = correction_metrics(old, rollout, MASK, "token", 2.0)
    # Ratios of the 5 generated tokens: 1/2, 1/2, 3, 3, 3. k3 = r - ln r - 1 per token.
    kl = (3 * (3 - LN3 - 1) + 2 * (0.5 + LN2 - 1)) / 5
    assert metrics[MISMATCH_KL] == pytest.approx(kl, rel=1e-6)
    assert metrics[RATIO_P50] == pytest.approx(3.0)  # the middle of five sorted values
    assert metrics[RATIO_P99] == pytest.approx(3.0)  # between the 4th and 5th, both 3
    assert metrics[CLIPPED_SHARE] == pytest.approx(3 / 5)


def test_sequence_level_weights_and_metrics_by_hand():
    old, rollout = shifted()
    weights = truncated_weights(old, rollout, MASK, "sequence", 2.0)
    # Response ratios: 3^3 = 27 (truncated to 2), (1/2)^2 = 1/4.
    assert torch.allclose(weights, torch.tensor([[2.0, 2.0, 2.0, 0.0], [0.25, 0.0, 0.25, 0.0]]))
    metrics = correction_metrics(old, rollout, MASK, "sequence", 2.0)
    # Two responses: quantile q of (1/4, 27) is 1/4 + q x (27 - 1/4) (linear interpolation).
    assert metrics[RATIO_P50] == pytest.approx(0.25 + 0.5 * 26.75)
    assert metrics[RATIO_P99] == pytest.approx(0.25 + 0.99 * 26.75)
    assert metrics[CLIPPED_SHARE] == pytest.approx(1 / 2)
    # The mismatch is per token at either level.
    assert metrics[MISMATCH_KL] == pytest.approx(
        correction_metrics(old, rollout, MASK, "token", 2.0)[MISMATCH_KL]
    )


def test_a_rollout_that_agrees_weighs_one_and_measures_zero():
    old, _ = shifted()
    assert torch.equal(truncated_weights(old, old, MASK, "token", 2.0), MASK)
    metrics = correction_metrics(old, old, MASK, "sequence", 2.0)
    assert metrics == {MISMATCH_KL: 0.0, RATIO_P50: 1.0, RATIO_P99: 1.0, CLIPPED_SHARE: 0.0}


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_weights_and_the_mismatch_are_verls(level):
    """ragym's definitions are verl's ``rollout_corr_helper``'s: the local engine weighs what verl's trainer weighs,
    and ``off_policy/mismatch_kl`` is verl's ``rollout_corr/k3_kl``."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 9, generator=generator) * 3
    rollout = old + torch.randn(6, 9, generator=generator) * 0.4
    mask = (torch.rand(6, 9, generator=generator) > 0.3).float()
    verl_weights, _, verl_metrics = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, rollout_is=level, rollout_is_threshold=2.0
    )
    assert verl_weights is not None
    assert torch.allclose(
        truncated_weights(old, rollout, mask, level, 2.0), verl_weights.batch["rollout_is_weights"]
    )
    ours = correction_metrics(old, rollout, mask, level, 2.0)
    assert ours[MISMATCH_KL] == pytest.approx(verl_metrics["rollout_corr/k3_kl"], rel=1e-5)
    if level == "token":  # verl's share of tokens over the bound
        assert ours[CLIPPED_SHARE] == pytest.approx(
            verl_metrics["rollout_corr/rollout_is_ratio_fraction_high"]
        )


def test_the_switch_resolves_auto_per_run_and_refuses_two_names():
    assert correction_level("auto", asynchronous=False, rollout="hf") is None
    assert correction_level("auto", asynchronous=True, rollout="hf") == "token"
    assert correction_level("auto", asynchronous=False, rollout="vllm") == "token"
    assert correction_level("off", asynchronous=True, rollout="vllm") is None
    with pytest.raises(ValueError, match="ragym.off_policy_correction must be one of"):
        correction_level("on", asynchronous=False, rollout="hf")
    config = OmegaConf.create(
        {
            "algorithm": {"rollout_correction": {"rollout_is": "token", "rollout_is_threshold": 1}},
            "ragym": {"off_policy_correction": "yes"},
        }
    )
    problems = correction_problems(config)
    assert len(problems) == 3 and all("\n" not in p for p in problems), problems
    assert correction_problems(OmegaConf.create({})) == []


def _recipe_correction(recipe: str, overrides: list[str]) -> str | None:
    """The level a shipped recipe's run uses: the local engine's (``ragym train``) and verl trainer's resolution."""
    from ragym.rl.off_policy import CORRECTION_KEY
    from ragym.rl.recipe.compose import load_recipe
    from ragym.rl.recipe.modes import run_correction_level

    config = load_recipe(recipe, overrides)
    assert correction_problems(config) == []
    if not overrides:  # the shipped recipes leave the switch at its default
        assert OmegaConf.select(config, CORRECTION_KEY, default="auto") == "auto"
    return run_correction_level(config)


def _shipped_recipes() -> list[str]:
    from ragym.rl.recipe.compose import PACKAGE_ROOT

    return sorted(p.stem for p in (PACKAGE_ROOT / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", _shipped_recipes())
def test_every_shipped_recipe_corrects_where_its_rollout_is_off_policy(recipe):
    """On by default with a vLLM rollout and in both async modes of verl's trainer; off for a sync hf rollout."""
    from ragym.rl.recipe.compose import load_recipe

    rollout = OmegaConf.select(load_recipe(recipe, []), "actor_rollout_ref.rollout.name")
    expected = "token" if rollout == "vllm" else None
    assert _recipe_correction(recipe, []) == expected
    for mode in ("ragym_colocate_async", "ragym_separate_async"):
        assert _recipe_correction(recipe, [f"trainer.v1.trainer_mode={mode}"]) == "token"
    assert (
        _recipe_correction(
            recipe, ["+ragym.off_policy_correction=off", "trainer.v1.trainer_mode=ragym_colocate_async"]
        )
        is None
    )


def test_the_local_engine_turns_the_correction_on_with_async_rollouts():
    from ragym.rl.engine.config import RecipeReader, read_engine_config
    from ragym.rl.recipe.compose import load_recipe

    def level(*overrides: str) -> str | None:
        config = load_recipe("kbvqa_tiny_cpu", ["trainer.total_training_steps=1", *overrides])
        return read_engine_config(RecipeReader(config)).update.correction

    assert level() is None
    assert level("ragym.engine.async_rollouts=true") == "token"
    assert level("ragym.engine.async_rollouts=true", "+ragym.off_policy_correction=sequence") == "sequence"
    assert level("+ragym.off_policy_correction=off", "ragym.engine.async_rollouts=true") is None


def test_the_local_engines_loss_weighs_each_token_by_its_truncated_ratio():
    """Rollout log-probs 2x each token's probability (ratio 1/2): the gradient is half the uncorrected one; ratio 4
    (over the bound 2): twice it. The metrics report the shift."""
    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass

    from ragym.rl.core.grpo import assemble, compute_advantages, response_log_probs, update_policy
    from ragym.rl.core.vision import ImageInputs
    from ragym.rl.engine.config import verl_defaults
    from tests.rl.core.test_grpo import _cfg, _samples
    from tests.rl.engine_helpers import build_model, image_processor

    actor = omega_conf_to_dataclass(
        OmegaConf.merge(
            verl_defaults().actor_rollout_ref.actor,
            {"ppo_micro_batch_size_per_gpu": 1, "ppo_mini_batch_size": 1},
        )
    )
    images = ImageInputs(image_processor())
    samples = _samples([1.0, 0.0, 2.0, 0.0], ["a", "a", "b", "b"])
    length = max(len(s.response_ids) for s in samples)
    with torch.no_grad():
        own = response_log_probs(build_model(), images, samples, length, 1.0)[0]

    def gradient(shift: float | None, correction: str | None) -> tuple[torch.Tensor, dict[str, float]]:
        model = build_model()  # the same initial weights each time
        rollout = [
            None if shift is None else (own[i, : len(s.response_ids)] - shift).tolist()
            for i, s in enumerate(samples)
        ]
        batch = assemble(
            [dataclasses.replace(s, rollout_log_probs=r) for s, r in zip(samples, rollout, strict=True)]
        )
        cfg = _cfg(correction=correction)
        compute_advantages(batch, AlgoConfig(), cfg)
        before = [p.detach().clone() for p in model.parameters()]
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        metrics = update_policy(
            model,
            optimizer,
            images,
            batch,
            actor,
            dataclasses.replace(cfg, grad_clip=1e9),
            torch.Generator().manual_seed(0),
        )
        step = torch.cat(
            [(b - p.detach()).flatten() for b, p in zip(before, model.parameters(), strict=True)]
        )
        return step, metrics

    plain, metrics = gradient(None, None)
    assert MISMATCH_KL not in metrics  # no rollout log-probs, nothing to measure
    on_policy, metrics = gradient(0.0, "token")
    assert torch.allclose(on_policy, plain, atol=1e-6) and metrics[MISMATCH_KL] == pytest.approx(
        0.0, abs=1e-6
    )
    half, metrics = gradient(-LN2, "token")
    assert torch.allclose(half, 0.5 * plain, atol=1e-6)
    assert metrics[RATIO_P50] == pytest.approx(0.5, rel=1e-4) and metrics[CLIPPED_SHARE] == 0.0
    clipped, metrics = gradient(2 * LN2, "token")
    assert torch.allclose(clipped, 2.0 * plain, atol=1e-6)
    assert metrics[RATIO_P99] == pytest.approx(4.0, rel=1e-4) and metrics[CLIPPED_SHARE] == 1.0
    # Off: the same shift is measured but not corrected.
    off, metrics = gradient(-LN2, None)
    assert torch.allclose(off, plain, atol=1e-6) and metrics[RATIO_P50] == pytest.approx(0.5, rel=1e-4)
