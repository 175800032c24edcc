"""Copy pretraining of a tiny policy: next-token prediction on random token spans that repeat.

A pretrained VLM arrives able to copy a name or a number from its context; a freshly initialised tiny policy
does not, and the demo's warm start has too few copies (a name and a value per episode, among hundreds of
formulaic tokens) for it to learn within minutes (``docs/results.md``, the CPU demo). Predicting the second
occurrence of a random span is the densest copy signal there is: the tiny policy learns it in ~100 steps
(induction: find the earlier occurrence of the current token, copy what followed it), on every token of its
vocabulary, before the warm start teaches the task.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ragym.rl.core.vision import rope_positions

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CopyPretrainConfig:
    """How long, and on what spans, the tiny policy is pretrained to copy."""

    steps: int = 0
    """Optimiser steps (0: no copy pretraining)."""
    batch_size: int = 16
    """Sequences per step."""
    min_span: int = 3
    """Shortest repeated span, in tokens."""
    max_span: int = 12
    """Longest repeated span."""
    max_gap: int = 24
    """Most random tokens before the span and between it and its repeat (each drawn in [0, max_gap])."""
    lr: float = 2.0e-3
    """AdamW learning rate."""
    until_loss: float | None = None
    """After ``steps``, go on until the mean loss of the last ``LOSS_WINDOW`` steps is at most this (None: stop at
    ``steps``). Induction forms suddenly, at a step that varies by seed and CPU: 800 steps took a 2-layer policy's
    loss from 7.3 to a tail of 0.10-0.27 on 9 seeds of 10 and left the tenth at 4.6, and a 3-layer one at 5.0-6.6
    on six of six. No shipped task sets it: the one seed it changed (the answer task's seed 6 on an Intel Xeon,
    induction formed at step 924) answered worse after it (0.08 of its confirmed questions against 0.92),
    docs/results.md, the answer task."""
    max_steps: int = 4000
    """The most steps in all when ``until_loss`` is set; a pretraining that reaches it without the loss is logged
    as a warning and recorded (``copy_pretrain.json``), and the warm start's copy target decides the run."""
    seed: int = 0
    """Token and length draws."""


LOSS_WINDOW = 50
"""Steps whose mean loss ``until_loss`` is compared with (one step's batch is noisy)."""


def tail_loss(losses: list[float]) -> float:
    """The mean of the last ``LOSS_WINDOW`` losses (of all of them when fewer).

    >>> tail_loss([9.0] * 10 + [1.0] * 50), tail_loss([2.0, 4.0])
    (1.0, 3.0)
    """
    tail = losses[-LOSS_WINDOW:]
    return sum(tail) / len(tail)


def pretrain_summary(losses: list[float], cfg: CopyPretrainConfig) -> dict[str, float | int | bool | None]:
    """What ``copy_pretrain`` did, as ``copy_pretrain.json`` records it: steps, first and tail loss, the target
    and whether it was met (True when no target is set).

    >>> s = pretrain_summary([7.0] * 60, CopyPretrainConfig(steps=60, until_loss=1.0))
    >>> s["steps"], s["tail_loss"], s["met"]
    (60, 7.0, False)
    """
    tail = tail_loss(losses) if losses else None
    met = cfg.until_loss is None or (tail is not None and tail <= cfg.until_loss)
    return {
        "steps": len(losses),
        "first_loss": losses[0] if losses else None,
        "tail_loss": tail,
        "until_loss": cfg.until_loss,
        "max_steps": cfg.max_steps if cfg.until_loss is not None else None,
        "met": met,
    }


def copy_batch(
    generator: torch.Generator, token_ids: torch.Tensor, cfg: CopyPretrainConfig
) -> tuple[torch.Tensor, int, int]:
    """One batch ``[B, T]`` of random tokens: a lead, a span, a gap, the span again; returns it with the span's
    length and where its repeat starts (the same in every row: one length per batch, no padding).

    >>> cfg = CopyPretrainConfig(batch_size=2, min_span=3, max_span=3, max_gap=0)  # no lead, no gap
    >>> batch, span, start = copy_batch(torch.Generator().manual_seed(0), torch.arange(10, 20), cfg)
    >>> tuple(batch.shape), span, start, bool((batch[:, :3] == batch[:, 3:]).all())
    ((2, 6), 3, 3, True)
    """
    span = int(torch.randint(cfg.min_span, cfg.max_span + 1, (1,), generator=generator))
    lead, gap = (int(n) for n in torch.randint(0, cfg.max_gap + 1, (2,), generator=generator))
    draw = torch.randint(len(token_ids), (cfg.batch_size, lead + span + gap), generator=generator)
    tokens = token_ids[draw]  # [B, lead + span + gap]
    repeat = tokens[:, lead : lead + span]  # [B, span]
    return torch.cat([tokens, repeat], dim=1), span, lead + span + gap


def copy_pretrain(model: torch.nn.Module, token_ids: torch.Tensor, cfg: CopyPretrainConfig) -> list[float]:
    """Train ``model`` to predict each repeated token after the first of the repeat (the first cannot be
    known) for ``cfg.steps`` steps, then, with ``cfg.until_loss`` set, until the tail loss reaches it or
    ``cfg.max_steps`` in all; returns each step's loss. The first ``steps`` are the same with or without a target,
    so a seed whose loss is already there is bit for bit what it was."""
    generator = torch.Generator().manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    losses: list[float] = []
    model.train()
    step = 0
    while step < cfg.steps or (
        cfg.until_loss is not None
        and step < cfg.max_steps
        and (not losses or tail_loss(losses) > cfg.until_loss)
    ):
        batch, span, start = copy_batch(generator, token_ids, cfg)
        attention = torch.ones_like(batch)
        positions = rope_positions(model, batch, attention, None)
        logits = model(input_ids=batch, attention_mask=attention, position_ids=positions).logits
        # Logit at p predicts token p + 1: the repeat's tokens 2..span, predicted from positions start..start+span-2.
        predicted = torch.log_softmax(logits[:, start : start + span - 1].float(), dim=-1)  # [B, span - 1, V]
        loss = -predicted.gather(-1, batch[:, start + 1 : start + span, None]).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if (step + 1) % 50 == 0:
            logger.info("copy pretraining step %d: loss %.3f", step + 1, losses[-1])
        step += 1
    model.eval()
    return losses
