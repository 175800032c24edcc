"""Where a GRPO step's time goes: verl's own trainer (``timing_s/*``) beside the local engine, same recipe and data.

Both engines run the toy KB-VQA run (`ragym train --engine verl --toy DIR`: the CPU demo's recipe at toy size,
the same synthetic rows and warm-started tiny policy) for ``--steps`` steps, in this one run, on this machine (verl
on CPU through ragym's plugin). Prints one row per step and engine: generation (rollout incl. env and reward
inside the agent loop), old log-probs, update, weight sync, checkpoint, and the whole step; the last line is
``ratio=`` verl's mean step time over the local engine's, steps after the first (the first includes warm-up).

    OMP_NUM_THREADS=2 python benchmarks/verl_timing.py --out runs/verl_timing --steps 4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

RECIPE = "kbvqa_tiny_cpu"
"""The CPU demo's recipe: it has the local engine's section, and verl ignores that section."""
VERL_ONLY = [
    "actor_rollout_ref.rollout.agent.agent_loop_config_path="
    + str(Path(__file__).resolve().parents[1] / "recipes/agent_loops/ragym.yaml"),
    "actor_rollout_ref.rollout.agent.default_agent_loop=ragym_env",
]
"""What verl needs that the local engine does not: the agent-loop registry file (the local engine builds its loop in
process)."""
VERL_KEYS = {
    "generate": "timing_s/gen",
    "old_log_prob": "timing_s/old_log_prob",
    "update": "timing_s/update_actor",
    "weight_sync": "timing_s/update_weights",
    "checkpoint": "timing_s/save_checkpoint",
    "step": "timing_s/step",
}
"""verl's timing keys (v1 trainer), under the columns this benchmark prints."""


def run_verl(toy: Path, steps: int) -> dict[int, dict[str, float]]:
    """verl's per-step metrics of a fresh toy run (its own checkpoint folder)."""
    from ragym.rl.core.metrics import METRICS_FILE, metrics_by_step, read_metrics

    ckpt = toy / "bench_checkpoints" / f"verl-{time.time_ns()}"
    command = [
        sys.executable,
        "-m",
        "ragym.rl.cli",
        "train",
        "--engine",
        "verl",
        "--recipe",
        RECIPE,
        "--toy",
        str(toy),
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={steps}",
        f"trainer.default_local_dir={ckpt}",
        *VERL_ONLY,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"verl run failed:\n{(done.stdout + done.stderr)[-4000:]}")
    return metrics_by_step(read_metrics(ckpt / METRICS_FILE))


def run_local(toy: Path, steps: int) -> dict[int, dict[str, float]]:
    """The local engine's per-step metrics on the same recipe, rows and policy (in this process)."""
    from ragym.rl.recipe.compose import resolve_recipe_path
    from ragym.rl.recipe.platforms import merge_overrides, platform_overrides
    from ragym.rl.train import build_trainer
    from ragym.rl.verl_plugin.verl_local import toy_overrides

    toy_set = platform_overrides("toy")
    overrides = merge_overrides(
        toy_set,
        toy_overrides(resolve_recipe_path(RECIPE), toy, toy_set),
        [
            f"trainer.total_training_steps={steps}",
            f"trainer.save_freq={steps}",
            f"trainer.default_local_dir={toy / 'bench_checkpoints' / f'local-{time.time_ns()}'}",
        ],
    )
    trainer = build_trainer(RECIPE, overrides)
    out = {}
    try:
        for step in range(1, steps + 1):
            start = time.perf_counter()
            metrics = trainer.train_step()
            out[step] = {**metrics, "timing_s/step": time.perf_counter() - start}
    finally:
        trainer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/verl_timing"), help="toy folder (reused)")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "disabled")
    verl = run_verl(args.out.resolve(), args.steps)
    local = run_local(args.out.resolve(), args.steps)
    print(f"{'engine':<6} {'step':>4} " + " ".join(f"{c:>12}" for c in VERL_KEYS))
    for step in sorted(verl):
        print(
            f"{'verl':<6} {step:>4} "
            + " ".join(f"{verl[step].get(k, float('nan')):>12.2f}" for k in VERL_KEYS.values())
        )
    local_keys = {
        "generate": "timing_s/rollout",
        "old_log_prob": None,
        "update": "timing_s/update",
        "weight_sync": None,
        "checkpoint": None,
        "step": "timing_s/step",
    }
    for step in sorted(local):
        row = [local[step].get(k, float("nan")) if k else float("nan") for k in local_keys.values()]
        print(f"{'local':<6} {step:>4} " + " ".join(f"{v:>12.2f}" for v in row))
    later = [s for s in verl if s > 1]
    verl_mean = sum(verl[s]["timing_s/step"] for s in later) / len(later)
    local_mean = sum(local[s]["timing_s/step"] for s in later) / len(later)
    print(
        f"ratio={verl_mean / local_mean:.2f} (verl {verl_mean:.2f} s vs local {local_mean:.2f} s per step, "
        f"steps 2-{args.steps})"
    )


if __name__ == "__main__":
    main()
