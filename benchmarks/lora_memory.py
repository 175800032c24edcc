"""Full fine-tuning vs LoRA: trainable parameters and peak memory of one training step, and the CPU demo's held-out
reward trained each way.

``memory``: each (policy, mode) is one fresh process that builds the policy from its config (fp32 weights, as verl's
``model_dtype``), adds peft's adapters for LoRA as both engines do (``ragym.rl.lora.add_adapters``: all-linear, the
vision tower excluded, every base weight frozen), turns on gradient checkpointing as verl does, and runs one AdamW
step on one sequence of ``--tokens`` tokens that holds one image (so the vision tower trains under full fine-tuning).
It prints the process's peak RSS (CPU; ``torch.cuda.max_memory_allocated`` with ``--device cuda``), the increase over
the RSS before the model was built, and the weights + gradients + Adam moments ``ragym budget memory`` counts for it
(P x 4 + 3 x P_t x 4 bytes). Policies: ``tiny`` (the tiny Qwen2.5-VL policy's default sizes) and ``qwen2_5_vl_7b``
(Qwen2.5-VL-7B's config: its hidden, MLP, attention and vision widths, but ``--layers`` decoder layers and vision
blocks and a ``--vocab`` vocabulary, so one fp32 AdamW step fits a shared CPU machine; the per-layer ratio is the 7B's).
The LoRA/full ratio of each policy is against its full fine-tuning measured in the same run.

``demo``: ``ragym demo`` (recipes/kbvqa_tiny_cpu.yaml) per seed, full fine-tuning then LoRA from the same warm-started
policy (the LoRA folder gets a copy of the full run's KB, tiny policy and warm start), each a fresh ``ragym demo``
process; prints the held-out reward before (the warm start) and after GRPO, the wall time and peak RSS.

Usage: ``python benchmarks/lora_memory.py [--parts memory demo] [--out runs/lora_memory] [--tokens 512]
[--layers 1] [--vocab 8192] [--seeds 0 1] [--lora-rank 8 --lora-alpha 16 --lora-lr 2e-3] [--device cpu]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULT = "lora_memory result: "
"""What a child process prints before its JSON result."""
POLICIES = ("tiny", "qwen2_5_vl_7b")
RANKS = {"tiny": 8, "qwen2_5_vl_7b": 64}
"""LoRA rank per policy: the docs' rank-8 example on the tiny policy, the 7B recipes' rank 64."""
DEMO_COPIED = ("kb", "tiny_policy", "warm_start", "demo.json")
"""What the LoRA demo folder takes from the full one: the same KB, tiny policy and warm-started policy."""


def policy_config(name: str, layers: int, vocab: int) -> Any:
    """The transformers config of ``name``: the tiny policy's, or Qwen2.5-VL-7B's widths at ``layers`` layers."""
    from ragym.rl.budget.model_size import QWEN2_5_VL_7B, config_from_dict

    if name == "tiny":
        from ragym.rl.tiny.policy import TinyPolicyConfig, model_config, train_tokenizer

        return model_config("qwen2_5_vl", TinyPolicyConfig(), train_tokenizer(["hello world"] * 4, 2048))
    vision = {**QWEN2_5_VL_7B["vision_config"], "depth": layers, "fullatt_block_indexes": [layers - 1]}
    # The special tokens move to the end of the smaller vocabulary.
    tokens = {
        name: vocab - 1 - i
        for i, name in enumerate(
            (
                "bos_token_id",
                "eos_token_id",
                "vision_start_token_id",
                "vision_end_token_id",
                "vision_token_id",
                "image_token_id",
                "video_token_id",
            )
        )
    }
    return config_from_dict(
        {
            **QWEN2_5_VL_7B,
            **tokens,
            "num_hidden_layers": layers,
            "max_window_layers": layers,
            "vocab_size": vocab,
            "vision_config": vision,
        }
    )


def training_batch(config: Any, tokens: int, device: str) -> dict[str, Any]:
    """One sequence of ``tokens`` ids holding one 16 x 16-patch image (64 placeholder tokens), labels on all."""
    import torch

    vision = config.vision_config
    merge, grid = vision.spatial_merge_size, 16
    patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    num_image = grid * grid // merge**2
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.get_text_config().vocab_size, (1, tokens), generator=generator)
    special = [
        config.image_token_id,
        config.video_token_id,
        config.vision_start_token_id,
        config.vision_end_token_id,
    ]
    plain = next(i for i in range(len(special) + 1) if i not in special)
    ids[torch.isin(ids, torch.tensor(special))] = plain  # no stray vision tokens in the text
    ids[0, 1 : 1 + num_image] = config.image_token_id
    ids[0, 0], ids[0, 1 + num_image] = config.vision_start_token_id, config.vision_end_token_id
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": ids.clone(),
        "pixel_values": torch.randn(grid * grid, patch, generator=generator),
        "image_grid_thw": torch.tensor([[1, grid, grid]]),
    }
    return {key: value.to(device) for key, value in batch.items()}


def rss_mib() -> float:
    """This process's current resident set (Linux /proc)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def child(policy: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One training step of ``policy`` trained ``mode`` (full or lora) in this fresh process; what it measured."""
    import torch
    from transformers import AutoModelForImageTextToText

    from ragym.rl.lora import VISION_TOWER, LoraSettings, add_adapters, trainable_parameters

    torch.manual_seed(0)
    config = policy_config(policy, args.layers, args.vocab)
    before = rss_mib()
    model = AutoModelForImageTextToText.from_config(config, torch_dtype=torch.float32).to(args.device)
    num_params = sum(p.numel() for p in model.parameters())
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode == "lora":
        model.enable_input_require_grads()  # verl's FSDP engine does this before wrapping (checkpointing + frozen inputs)
        settings = LoraSettings(
            rank=RANKS[policy],
            alpha=RANKS[policy],
            target_modules="all-linear",
            exclude_modules=VISION_TOWER,
            adapter_path=None,
        )
        model = add_adapters(model, settings, "unsaved")
    model.train()
    params = trainable_parameters(model)
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss = model(**training_batch(config, args.tokens, args.device)).loss
    loss.backward()
    optimizer.step()
    seconds = time.perf_counter() - start
    trainable = sum(p.numel() for p in params)
    moments = sum(s["exp_avg"].numel() + s["exp_avg_sq"].numel() for s in optimizer.state.values())
    peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else _peak_rss_mib()
    return {
        "policy": policy,
        "mode": mode,
        "num_params": num_params,
        "trainable": trainable,
        "adam_values": moments,
        "peak_mib": peak,
        "before_mib": 0.0 if args.device == "cuda" else before,
        "state_mib": (num_params + 3 * trainable) * 4 / 2**20,
        "seconds": seconds,
        "loss": float(loss),
    }


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(policy: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """``child`` in a fresh process (a process's peak RSS never goes down)."""
    command = [
        sys.executable,
        __file__,
        "--child",
        policy,
        mode,
        "--tokens",
        str(args.tokens),
        "--layers",
        str(args.layers),
        "--vocab",
        str(args.vocab),
        "--device",
        args.device,
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{policy} {mode} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT) :])


def memory_part(args: argparse.Namespace) -> None:
    """The trainable parameters and the step's peak memory, full vs LoRA, per policy."""
    where = "CUDA peak allocated" if args.device == "cuda" else "peak RSS"
    print(
        f"one AdamW step, fp32 weights, gradient checkpointing, {args.tokens} tokens with one image, {where}; "
        f"qwen2_5_vl_7b = the 7B's widths at {args.layers} layer(s), vocabulary {args.vocab:,}"
    )
    print(
        "| policy | mode | parameters | trainable | share | Adam values | peak MiB | peak - before MiB "
        "| weights+grads+Adam MiB (arithmetic) | LoRA/full peak | LoRA/full increase | step s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for policy in args.policies:
        full = None
        for mode in ("full", "lora"):
            r = run_child(policy, mode, args)
            increase = r["peak_mib"] - r["before_mib"]
            full = full or r
            ratios = (
                ("1", "1")
                if mode == "full"
                else (
                    f"{r['peak_mib'] / full['peak_mib']:.3f}",
                    f"{increase / (full['peak_mib'] - full['before_mib']):.3f}",
                )
            )
            print(
                f"| {policy} | {mode} | {r['num_params']:,} | {r['trainable']:,} | "
                f"{r['trainable'] / r['num_params']:.2%} | {r['adam_values']:,} | {r['peak_mib']:,.0f} | "
                f"{increase:,.0f} | {r['state_mib']:,.0f} | {ratios[0]} | {ratios[1]} | {r['seconds']:.1f} |",
                flush=True,
            )


def demo(out: Path, seed: int, overrides: list[str]) -> dict[str, Any]:
    """``ragym demo --out OUT --seed SEED OVERRIDES`` in a fresh process; its metrics.json (a finished folder is
    read, not run again, so a re-run of the benchmark continues where it stopped)."""
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    command = [
        str(Path(sys.executable).parent / "ragym"),
        "demo",
        "--out",
        str(out),
        "--seed",
        str(seed),
        *overrides,
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads((out / "metrics.json").read_text())
    return {**result, "command_s": time.perf_counter() - start}


def demo_part(args: argparse.Namespace) -> None:
    """The CPU demo trained full and with LoRA from the same warm start, per seed."""
    lora = [
        f"actor_rollout_ref.model.lora_rank={args.lora_rank}",
        f"actor_rollout_ref.model.lora_alpha={args.lora_alpha}",
        f"actor_rollout_ref.actor.optim.lr={args.lora_lr}",
    ]
    print(
        f"ragym demo (kbvqa_tiny_cpu) per seed: full fine-tuning (the recipe's lr), then LoRA ({' '.join(lora)}) "
        "from the same warm-started policy"
    )
    print(
        "| seed | mode | trainable | held-out reward before | after | ident_acc after | demo s | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        full_dir, lora_dir = args.out / f"demo_full_s{seed}", args.out / f"demo_lora_s{seed}"
        runs = [("full", full_dir, [])]
        runs += [("lora", lora_dir, lora)]
        for mode, folder, overrides in runs:
            if mode == "lora" and not (folder / "warm_start").exists():
                folder.mkdir(parents=True, exist_ok=True)
                for name in DEMO_COPIED:
                    copy = shutil.copytree if (full_dir / name).is_dir() else shutil.copy2
                    copy(full_dir / name, folder / name)
            r = demo(folder, seed, overrides)
            trainable = _trainable(folder)
            print(
                f"| {seed} | {mode} | {trainable} | {r['before']['reward_mean']:.3f} | {r['after']['reward_mean']:.3f} "
                f"| {r['after']['ident_acc']:.2f} | {r['wall_time_s']:.0f} | {r['peak_rss_mb']:.0f} |",
                flush=True,
            )


def _trainable(folder: Path) -> str:
    """Parameters of the demo's last checkpoint: the policy's, or its adapters' under LoRA."""
    from safetensors.torch import load_file

    steps = sorted((folder / "grpo").glob("global_step_*"), key=lambda p: int(p.name.split("_")[-1]))
    files = list(steps[-1].glob("adapter_model.safetensors")) or list(steps[-1].glob("*.safetensors"))
    return f"{sum(t.numel() for file in files for t in load_file(str(file)).values()):,}"


def main() -> None:
    """Run the parts asked for and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("memory", "demo"), default=["memory", "demo"])
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "lora_memory")
    parser.add_argument("--tokens", type=int, default=512, help="tokens of the training step's sequence")
    parser.add_argument(
        "--layers", type=int, default=1, help="qwen2_5_vl_7b: decoder layers and vision blocks"
    )
    parser.add_argument(
        "--vocab", type=int, default=8192, help="qwen2_5_vl_7b: vocabulary (the 7B's is 152,064)"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--lora-alpha", type=int, default=16)
    parser.add_argument(
        "--lora-lr", type=float, default=2e-3, help="LoRA's lr (the demo's full lr 2e-4 x 10)"
    )
    parser.add_argument("--child", nargs=2, metavar=("POLICY", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    if args.child:
        print(RESULT + json.dumps(child(*args.child, args)), flush=True)
        return
    start = time.perf_counter()
    if "memory" in args.parts:
        memory_part(args)
    if "demo" in args.parts:
        demo_part(args)
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
