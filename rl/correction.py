"""Truncated importance sampling between the rollout's and the trainer's log-probs, and its per-step metrics.

An episode trained on was sampled by the rollout policy (weights one or more versions old under async rollouts; a
rollout engine with kernels of its own, vLLM's, on GPUs), while the loss assumes the trainer's. The correction
weights each response token's policy-gradient term by the ratio ``pi_trainer / pi_rollout`` of the token (level
``token``) or of the whole response (``sequence``), truncated at ``threshold``: verl 0.9.1's
``algorithm.rollout_correction`` (``rollout_is``, ``rollout_is_threshold``; TIS), which verl's trainer applies, with
the same definitions here for the local engine (``truncated_weights``; a test holds the two equal). ``pi_trainer`` is
the trainer's log-prob before the step's update (verl's ``old_log_probs``).

Both engines log the same metrics each step (``correction_metrics``), whether or not the correction is on:
``off_policy/mismatch_kl``, the k3 estimate of KL(rollout || trainer) over generated tokens (verl's
``rollout_corr/k3_kl``); ``off_policy/is_ratio_p50`` and ``off_policy/is_ratio_p99``, quantiles of the ratio (per
token, or per response at the ``sequence`` level); ``off_policy/is_clipped_share``, the share of ratios above the
bound, whose weight the truncation lowered.
"""

from __future__ import annotations

import torch

SAFETY_BOUND = 20.0
"""Log-ratios are clamped to +-20 before exponentiating (verl's ``SAFETY_BOUND``)."""
LEVELS = ("token", "sequence")
MISMATCH_KL = "off_policy/mismatch_kl"
"""k3 estimate of KL(rollout || trainer) per generated token: 0 when the two agree."""
RATIO_P50 = "off_policy/is_ratio_p50"
RATIO_P99 = "off_policy/is_ratio_p99"
CLIPPED_SHARE = "off_policy/is_clipped_share"
"""Share of the ratios (tokens, or responses at the sequence level) above the truncation bound."""


def _ratios(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """Untruncated ratios, [N, R] (``token``: each token's; ``sequence``: the response's, on each of its tokens),
    zero off the mask."""
    if level not in LEVELS:
        raise ValueError(f"importance-sampling level must be one of {LEVELS}, got {level!r}")
    if level == "sequence":
        log_ratio = (log_ratio * mask).sum(-1, keepdim=True).expand_as(log_ratio)  # [N, R]
    return torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * mask


def truncated_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    mask: torch.Tensor,
    level: str,
    threshold: float,
) -> torch.Tensor:
    """Importance weights [N, R] of generated tokens: ``min(pi_trainer / pi_rollout, threshold)`` per token or per
    response; 0 off the mask; no gradient.

    >>> old = torch.log(torch.tensor([[0.5, 0.5]]))
    >>> truncated_weights(old, old - torch.tensor([[0.1, 1.0]]), torch.ones(1, 2), "token", 2.0)
    tensor([[1.1052, 2.0000]])
    """
    ratio = _ratios(old_log_prob.detach() - rollout_log_prob, mask, level)
    return ratio.clamp(max=threshold).detach()


def correction_metrics(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    mask: torch.Tensor,
    level: str,
    threshold: float,
) -> dict[str, float]:
    """The step's mismatch and ratio metrics over mask-1 tokens (``level``: what the ratios are of); empty when the
    batch has no generated token."""
    mask = mask.to(torch.float64)
    if mask.sum() == 0:
        return {}
    log_ratio = old_log_prob.detach().to(torch.float64) - rollout_log_prob.to(torch.float64)  # [N, R]
    k3 = torch.exp(log_ratio) - log_ratio - 1
    ratio = _ratios(log_ratio, mask, level)
    if level == "sequence":
        values = ratio[mask.sum(-1) > 0].amax(-1)  # [responses with a generated token]
    else:
        values = ratio[mask.bool()]  # [generated tokens]
    quantiles = torch.quantile(values, torch.tensor([0.5, 0.99], dtype=torch.float64))
    return {
        MISMATCH_KL: float((k3 * mask).sum() / mask.sum()),
        RATIO_P50: float(quantiles[0]),
        RATIO_P99: float(quantiles[1]),
        CLIPPED_SHARE: float((values > threshold).to(torch.float64).mean()),
    }
