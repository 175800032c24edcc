"""``ragym budget gpu-check``: one update step of a recipe's policy on one GPU, as verl's actor computes it, measured
beside the budget's prediction, with its step time, tokens/s and model FLOP utilisation.

The policy is built from its config with random weights (nothing downloaded): fp32 master weights on the GPU (FSDP's
``model_dtype`` over one shard), bf16 autocast (FSDP's mixed precision), the recipe's gradient checkpointing, flash
attention where flash-attn is installed and SDPA otherwise, peft's adapters where the recipe has LoRA (the vision
tower excluded, as the recipes do), fused AdamW. One micro-batch of the recipe's length (its episodes of the recipe's
prompt + response length) holds the images the budget counts; log-probs are taken on the recipe's path (verl's:
``chunked_log_probs``, bf16 logits and their bf16 gradient; or transformers' ``labels`` loss) and a PPO-clip loss
of random advantages is stepped twice: the peak is over both, the time the second's.

This module imports torch, transformers and peft only (never vLLM, verl, Ray or flash-attn), so a bare GPU machine
runs it from a plans file that ``ragym budget gpu-check --write-plans`` made where the recipes compose:
``python -m ragym.rl.budget.gpu_check --plans benchmarks/gpu_check_plans.json``.

Model FLOPs of one step (``step_flops``), with T tokens, W the language model's matmul weights (decoder layers and
the output head; W_t of them trainable), Pv patches and Wv the vision tower's, n sequences of S tokens, L layers
of query width q: forward 2 T W + 2 Pv Wv + 2 n S^2 q L (causal attention, QK^T and AV); backward 2 T W (input
gradients) + 2 T W_t (weight gradients) + 4 n S^2 q L, and 4 Pv Wv when the tower trains. Recomputation under
checkpointing and the vision attention are not counted. MFU = FLOPs / step time / the GPU's dense bf16 peak.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ragym.rl.budget.model_size import KNOWN_CONFIGS, config_from_dict
from ragym.rl.budget.plan import CheckPlan, image_grid
from ragym.rl.errors import UsageError
from ragym.rl.lora import LoraSettings, add_adapters

logger = logging.getLogger(__name__)
GIB = 2**30
BF16_PEAKS = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("B100", 1.75e15),
    ("H200", 989.4e12),
    ("GH200", 989.4e12),
    ("H100 PCIe", 756.5e12),
    ("H100", 989.4e12),
    ("H800", 989.4e12),
    ("H20", 148e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362.05e12),
    ("L40", 181e12),
    ("A10G", 70e12),
    ("L4", 121e12),
)
"""Dense bf16 tensor-core peaks (FLOP/s, no sparsity) by a part of ``torch.cuda.get_device_name()``, first match
wins (so "H100 PCIe" before "H100", "H200" before "H20"); NVIDIA's data sheets, SXM parts."""


def bf16_peak(device_name: str) -> float | None:
    """The dense bf16 peak of the GPU named ``device_name``, or None when the table does not know it.

    >>> bf16_peak("NVIDIA H200"), bf16_peak("NVIDIA H100 PCIe"), bf16_peak("NVIDIA H20"), bf16_peak("Tesla T4")
    (989400000000000.0, 756500000000000.0, 148000000000000.0, None)
    """
    return next((peak for part, peak in BF16_PEAKS if part in device_name), None)


@dataclass(frozen=True)
class Device:
    """Where the step runs and how it is measured: the GPU, or a test's CPU stand-in (the seam)."""

    name: str
    """The device's name (``torch.cuda.get_device_name``)."""
    torch_device: str
    """torch's device string ("cuda" or "cpu")."""
    memory_bytes: float
    """The device's memory."""
    peak_flops: float | None
    """Dense bf16 peak, FLOP/s (None: MFU not reported)."""
    peak_allocated: Callable[[], float]
    """Bytes allocated at the peak since ``reset_peak``."""
    reset_peak: Callable[[], None]
    """Starts a new peak."""
    clock: Callable[[], float]
    """Seconds, after the device finished its queued work."""


def cuda_device(peak_flops: float | None = None) -> Device:
    """The current CUDA GPU; refuses in one line where there is none."""
    if not torch.cuda.is_available():
        raise UsageError(
            "gpu-check measures one update step on a GPU: torch.cuda.is_available() is False here "
            "(`ragym budget memory` gives the arithmetic)"
        )
    name = torch.cuda.get_device_name()

    def clock() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()

    return Device(
        name=name,
        torch_device="cuda",
        memory_bytes=torch.cuda.get_device_properties(0).total_memory,
        peak_flops=peak_flops or bf16_peak(name),
        peak_allocated=torch.cuda.max_memory_allocated,
        reset_peak=torch.cuda.reset_peak_memory_stats,
        clock=clock,
    )


@dataclass(frozen=True)
class CheckResult:
    """What one recipe's check measured and derived."""

    recipe: str
    predicted_gib: float
    measured_gib: float
    step_s: float
    tokens: int
    flops: float
    peak_flops: float | None
    attention: str

    @property
    def tokens_per_s(self) -> float:
        """Micro-batch tokens over the step time."""
        return self.tokens / self.step_s

    @property
    def mfu(self) -> float | None:
        """Model FLOPs / step time / the GPU's bf16 peak."""
        return None if self.peak_flops is None else self.flops / self.step_s / self.peak_flops

    def line(self) -> str:
        """The printed row."""
        mfu = "n/a (unknown GPU peak)" if self.mfu is None else f"{100 * self.mfu:.1f}%"
        ratio = self.measured_gib / self.predicted_gib - 1
        return (
            f"| {self.recipe} | {self.predicted_gib:.2f} | {self.measured_gib:.2f} | {100 * ratio:+.1f}% | "
            f"{self.step_s:.2f} | {self.tokens_per_s:,.0f} | {self.flops:.3e} | {mfu} | {self.attention} |"
        )


HEADER = (
    "| recipe | budget GiB (update) | measured peak GiB | measured / budget | step s | tokens/s | model FLOPs "
    "| MFU (bf16 peak) | attention |\n|---|---|---|---|---|---|---|---|---|"
)


def chunked_log_probs(logits: torch.Tensor, labels: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Log-probs of ``labels`` [N] under ``logits`` [N, V] that keep nothing but the logits for the backward pass and
    write one gradient of their dtype (verl's path: 2 + 2 bytes a bf16 logit); fp32 within each chunk of rows."""
    return _ChunkedLogProbs.apply(logits, labels, chunk)  # pyright: ignore[reportReturnType]


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor, chunk: int) -> torch.Tensor:
        lse = torch.cat(
            [torch.logsumexp(logits[i : i + chunk].float(), dim=-1) for i in range(0, len(logits), chunk)]
        )
        ctx.save_for_backward(logits, labels, lse)
        ctx.chunk = chunk
        return logits.gather(-1, labels[:, None]).squeeze(-1).float() - lse  # [N]

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        (grad,) = grads
        logits, labels, lse = ctx.saved_tensors
        out = torch.empty_like(logits)  # [N, V]: the one gradient buffer
        for i in range(0, len(logits), ctx.chunk):
            rows = slice(i, i + ctx.chunk)
            part = -torch.exp(logits[rows].float() - lse[rows, None])
            part.scatter_add_(-1, labels[rows, None], torch.ones_like(lse[rows, None]))
            out[rows] = (part * grad[rows, None]).to(out.dtype)
        return out, None, None


def build_policy(plan: CheckPlan, device: Device, attention: str) -> tuple[Any, torch.nn.Module, list[Any]]:
    """(config, model, trainable parameters) of the plan's policy, random fp32 weights on ``device``."""
    from transformers import AutoModelForImageTextToText

    config = plan.model_config() if plan.config else config_from_dict(KNOWN_CONFIGS[plan.model])
    with torch.device(device.torch_device):
        model = AutoModelForImageTextToText.from_config(
            config, dtype=torch.float32, attn_implementation=attention
        )
    if plan.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if plan.lora is not None:
        model.enable_input_require_grads()  # as verl's FSDP engine does before wrapping (frozen embeddings)
        model = add_adapters(model, LoraSettings(**plan.lora, adapter_path=None), "random")
    elif plan.freeze_vision_tower:
        for name, param in model.named_parameters():
            param.requires_grad_(".visual." not in f".{name}")
    model.train()
    return config, model, [p for p in model.parameters() if p.requires_grad]


def micro_batch(plan: CheckPlan, config: Any, device: Device) -> dict[str, torch.Tensor]:
    """The plan's micro-batch: ``sequences`` x ``sequence_tokens`` random ids, its images (round robin over the
    sequences, each ``<|vision_start|>``, its tokens, ``<|vision_end|>``) and their random fp32 pixel values."""
    vision, text = config.vision_config, config.get_text_config()
    generator = torch.Generator().manual_seed(0)
    special = torch.tensor(
        [
            config.image_token_id,
            config.video_token_id,
            config.vision_start_token_id,
            config.vision_end_token_id,
        ]
    )
    ids = torch.randint(0, text.vocab_size, (plan.sequences, plan.sequence_tokens), generator=generator)
    ids[torch.isin(ids, special)] = 0  # no stray vision tokens in the text
    grid = image_grid(plan.tokens_per_image, vision.spatial_merge_size)
    cursor = [0] * plan.sequences
    for image in range(plan.num_images):
        row, start = image % plan.sequences, cursor[image % plan.sequences]
        ids[row, start] = config.vision_start_token_id
        ids[row, start + 1 : start + 1 + plan.tokens_per_image] = config.image_token_id
        ids[row, start + 1 + plan.tokens_per_image] = config.vision_end_token_id
        cursor[row] = start + plan.tokens_per_image + 2
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if plan.num_images:
        patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
        num_patches = plan.num_images * grid[0] * grid[1]
        batch["pixel_values"] = torch.randn(num_patches, patch, generator=generator)  # [Pv, D]
        batch["image_grid_thw"] = torch.tensor([[1, *grid]] * plan.num_images)  # [N, 3]
    return {key: value.to(device.torch_device) for key, value in batch.items()}


def step_flops(plan: CheckPlan, config: Any, model: torch.nn.Module) -> float:
    """Model FLOPs of one update step (the module docstring's count)."""
    lm = lm_trainable = vis = 0
    vision_trains = False
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear | torch.nn.Conv3d):
            continue
        weight = module.weight.numel()
        if ".visual." in f".{name}.":
            vis += weight
            vision_trains |= module.weight.requires_grad
        else:
            lm += weight
            lm_trainable += weight if module.weight.requires_grad else 0
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    tokens, patches = plan.sequences * plan.sequence_tokens, plan.num_images * plan.tokens_per_image * 4
    attention = 2 * plan.sequences * plan.sequence_tokens**2 * text.num_attention_heads * head_dim
    attention *= text.num_hidden_layers
    forward = 2 * tokens * lm + 2 * patches * vis + attention
    backward = (
        2 * tokens * lm
        + 2 * tokens * lm_trainable
        + 2 * attention
        + (4 * patches * vis if vision_trains else 0)
    )
    return float(forward + backward)


def attention_for(plan: CheckPlan, device: Device) -> str:
    """The recipe's attention implementation where it can run here: flash-attn's only where it is installed."""
    if plan.attention != "flash_attention_2" or device.torch_device != "cuda":
        return "sdpa"
    try:
        import flash_attn  # noqa: F401  # pyright: ignore[reportMissingImports]  (only probed: the check never needs it)
    except ImportError:
        return "sdpa"
    return "flash_attention_2"


def run_check(plan: CheckPlan, device: Device) -> CheckResult:
    """Two update steps of ``plan`` on ``device``: the peak over both, the second one's time."""
    attention = attention_for(plan, device)
    config, model, params = build_policy(plan, device, attention)
    fused = device.torch_device == "cuda"
    optimizer = torch.optim.AdamW(params, lr=1e-6, fused=fused)
    batch = micro_batch(plan, config, device)
    labels = torch.roll(batch["input_ids"], -1, dims=1).reshape(-1)  # next tokens; the last one's is unused
    advantages = torch.randn(labels.shape, generator=torch.Generator().manual_seed(1)).to(device.torch_device)
    device.reset_peak()
    step_s = 0.0
    for _ in range(2):
        start = device.clock()
        with torch.autocast(device.torch_device, dtype=torch.bfloat16):
            if plan.logprob_path == "labels":
                loss = model(**batch, labels=batch["input_ids"]).loss
            else:
                logits = model(**batch).logits  # [n, S, V] bf16
                logp = chunked_log_probs(logits.view(-1, logits.shape[-1]), labels)  # [n x S]
                ratio = torch.exp(logp - logp.detach())
                loss = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_s = device.clock() - start
    measured = device.peak_allocated() / GIB
    flops = step_flops(plan, config, model)
    del model, optimizer, batch
    return CheckResult(
        recipe=plan.recipe,
        predicted_gib=plan.predicted_gib,
        measured_gib=measured,
        step_s=step_s,
        tokens=plan.sequences * plan.sequence_tokens,
        flops=flops,
        peak_flops=device.peak_flops,
        attention=attention,
    )


def check_all(plans: list[CheckPlan], device: Device) -> int:
    """Check each plan that fits ``device`` and print its row; one line for each that would not fit. Returns the
    exit status: 0 when every plan ran, 1 when one would not fit or ran out of memory."""
    print(
        f"gpu-check on {device.name} ({device.memory_bytes / GIB:.1f} GiB, bf16 peak "
        f"{'unknown' if device.peak_flops is None else f'{device.peak_flops / 1e12:,.1f} TFLOP/s'})"
    )
    for plan in plans:
        print(f"  {plan.recipe}: {plan.describe()}")
    print(HEADER, flush=True)
    status = 0
    for plan in plans:
        if plan.predicted_gib * GIB > device.memory_bytes:
            print(
                f"gpu-check: {plan.recipe} would not fit one GPU of {device.memory_bytes / GIB:.1f} GiB: the budget's "
                f"update is {plan.predicted_gib:.2f} GiB on one GPU ({plan.scale_note})",
                flush=True,
            )
            status = 1
            continue
        try:
            print(run_check(plan, device).line(), flush=True)
        except torch.OutOfMemoryError:
            print(
                f"gpu-check: {plan.recipe} ran out of memory on one GPU of {device.memory_bytes / GIB:.1f} GiB "
                f"(budget {plan.predicted_gib:.2f} GiB)",
                flush=True,
            )
            status = 1
        finally:
            import gc

            gc.collect()
            if device.torch_device == "cuda":
                torch.cuda.empty_cache()
    return status


def main(argv: list[str] | None = None) -> int:
    """``python -m ragym.rl.budget.gpu_check --plans FILE [--recipe R ...] [--peak-tflops X]``: the check from a
    plans file, on a machine with torch, transformers and peft only."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "--plans", type=Path, required=True, help="plans JSON (ragym budget gpu-check --write-plans)"
    )
    parser.add_argument("--recipe", action="append", help="only these recipes (default: every plan)")
    parser.add_argument(
        "--peak-tflops", type=float, help="the GPU's dense bf16 peak, where the table lacks it"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        plans = [CheckPlan(**p) for p in json.loads(args.plans.read_text())]
        if args.recipe:
            unknown = sorted(set(args.recipe) - {p.recipe for p in plans})
            if unknown:
                raise UsageError(f"--recipe {', '.join(unknown)}: not in {args.plans}")
            plans = [p for p in plans if p.recipe in args.recipe]
        return check_all(plans, cuda_device(args.peak_tflops and args.peak_tflops * 1e12))
    except UsageError as err:
        print(f"gpu-check: {err}", file=sys.stderr)
        return 2


def plans_json(plans: list[CheckPlan]) -> str:
    """``plans`` as the file ``main`` reads."""
    return json.dumps([asdict(p) for p in plans], indent=1) + "\n"


if __name__ == "__main__":
    sys.exit(main())
