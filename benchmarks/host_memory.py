"""Host memory per step: the local engine's batch with its images by reference against the same batch with pixels
(issue #38 item 5).

    python benchmarks/host_memory.py [--steps 12] [--batch 4] [--n 8] [--workdir DIR] [--budget-recipe NAME]

The CPU demo's KB-VQA run (``kbvqa_tiny_cpu`` on the synthetic demo KB, in-process search) with the briefly
warm-started tiny policy of ``benchmarks/local_engine.py`` (built once in ``--workdir``, so that episodes search and
see candidate images). Each mode runs ``--steps`` GRPO steps of ``--batch`` rows x ``--n`` episodes in a fresh
process (RSS is a process's history): ``refs``, the engine as shipped (``ragym.rl.core.rollout.by_reference``: a
step's episodes hold ``ImageRef``s); ``pixels``, the engine before it (the episodes keep the agent loop's PIL
images, and nothing is kept in the image cache for references). Printed per mode:

- driver RSS growth per step: the slope of the resident set after each step (a least-squares line over steps
  ``--warm-steps``+1..N, after a garbage collection; the first steps allocate the optimizer's state and the caches),
  against the goal of 1 MB per step;
- the step's batch pickled (what a hop that pickles it, such as a Ray object store, carries): total bytes, image
  payload bytes (``ragym.envs.image_ref.pickled_image_bytes``: PIL images, uint8 arrays, floating tensors), images
  per trajectory and bytes per image reference.

Then, at the paper's batch (``--prompts`` x ``--samples`` trajectories a step) and the image budget of
``--budget-recipe`` (``ragym.images``; the KB-VQA env's defaults for candidates per episode: K x (Rej_max + 1)), the
bytes one step's batch carries: pixels (uint8 RGB, what PIL images pickle to), references (the measured bytes per
reference), and verl's ``multi_modal_inputs`` (the processor's float32 ``pixel_values`` at the measured bytes per
pixel): the hop verl owns (docs/training.md "Host memory").
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.local_engine import _inputs, local_run_overrides  # noqa: E402

GOAL_BYTES_PER_STEP = 1 << 20
"""The issue's goal: the driver grows by at most 1 MB per step on the toy run."""


def _rss_bytes() -> int:
    """This process's resident set (``/proc/self/status`` VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _child(args: argparse.Namespace) -> None:
    """One mode's run; prints one JSON line of its figures."""
    import ragym.rl.core.rollout as rollout
    from ragym.envs.image_ref import ImageRef, pickled_image_bytes
    from ragym.rl.train import build_trainer

    if args.child == "pixels":
        rollout.by_reference = lambda output: output  # the batch keeps the agent loop's PIL images
    kb, policy = args.kb, args.policy
    out = Path(tempfile.mkdtemp(prefix=f"{args.child}-", dir=args.workdir))
    trainer = build_trainer(
        args.recipe,
        [
            *local_run_overrides(policy, kb, out, args.steps),
            "data.max_response_length=256",
            f"data.train_batch_size={args.batch}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
            f"actor_rollout_ref.rollout.n={args.n}",
        ],
    )
    trainer.agent_loop.keep_image_pixels = args.child == "refs"
    batches: list[tuple[int, int, int, int, int]] = []
    sample_batch = trainer._sample_batch

    def measured(*a, **k):
        sampled, times = sample_batch(*a, **k)
        images = [
            i
            for group in sampled.groups
            for e in group
            for i in (e.output.multi_modal_data or {}).get("images", [])
        ]
        refs = [i for i in images if isinstance(i, ImageRef)]
        total, payload = pickled_image_bytes(sampled)
        ref_bytes = pickled_image_bytes(refs)[0] if refs else 0
        # One reference alone (its path and budget not shared with another's): the extrapolation's cost per image.
        alone = max((pickled_image_bytes(ref)[0] for ref in refs), default=0)
        batches.append((sum(map(len, sampled.groups)), len(images), total, payload, ref_bytes, alone))
        return sampled, times

    trainer._sample_batch = measured
    rss = []
    for _ in range(args.steps):
        trainer.train_step()
        gc.collect()
        rss.append(_rss_bytes())
    per_pixel = _pixel_values_per_pixel(trainer)
    trainer.close()
    trajectories, images, total, payload, ref_bytes = (
        sum(column) for column in list(zip(*batches, strict=True))[:5]
    )
    print(
        json.dumps(
            {
                "mode": args.child,
                "rss": rss,
                "trajectories": trajectories,
                "images": images,
                "pickled": total,
                "payload": payload,
                "ref_bytes": ref_bytes,
                "ref_alone": max(b[5] for b in batches),
                "pixel_values_per_pixel": per_pixel,
            }
        )
    )


def _pixel_values_per_pixel(trainer) -> float:
    """Bytes of the processor's ``pixel_values`` per pixel it encodes (float32 patches: verl's training input)."""
    pixels = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    encoded = trainer.image_inputs.encode([pixels])
    patch = trainer.processor.image_processor.patch_size
    num_pixels = (
        int(encoded["image_grid_thw"].prod()) * patch * patch
    )  # the processed image's, not the input's
    values = encoded["pixel_values"]
    return values.element_size() * values.nelement() / num_pixels


def _slope(values: list[int], warm: int) -> float:
    """Least-squares growth per step of ``values`` after the first ``warm``."""
    tail = values[warm:]
    if len(tail) < 2:
        raise ValueError(f"--steps must exceed --warm-steps + 1 to fit a slope, got {len(values)} steps")
    return float(np.polyfit(np.arange(len(tail)), np.asarray(tail, dtype=float), 1)[0])


def _budget(recipe: str) -> tuple[int, int, int, int]:
    """(query pixels, candidate pixels, query images, candidates) per trajectory at ``recipe``'s image budget."""
    from omegaconf import OmegaConf

    from ragym.envs.kbvqa.env import KBVQAConfig
    from ragym.rl.recipe.compose import compose_recipe

    # Composed with its bases (recipes/base/): the image budget and Rej_max live there.
    config = compose_recipe(recipe)
    images = config.ragym.images
    cfg = KBVQAConfig()
    max_rejections = OmegaConf.select(config, "ragym.env.max_rejections", default=cfg.max_rejections)
    return (
        int(images.query_max_pixels),
        int(images.candidate_max_pixels),
        1,
        cfg.candidates_per_batch * (int(max_rejections) + 1),
    )


def _gb(num: float) -> str:
    return f"{num / 1e9:,.2f} GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="kbvqa_tiny_cpu", help="the toy run's recipe (a name or a path)")
    parser.add_argument(
        "--budget-recipe",
        default="kbvqa_qwen2_5_vl_7b",
        help="the recipe whose image budget is extrapolated to",
    )
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warm-steps", type=int, default=2, help="steps left out of the RSS slope")
    parser.add_argument("--batch", type=int, default=4, help="data.train_batch_size (rows per step)")
    parser.add_argument("--n", type=int, default=8, help="actor_rollout_ref.rollout.n (episodes per row)")
    parser.add_argument("--prompts", type=int, default=1024, help="prompts per step to extrapolate to")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt to extrapolate to")
    parser.add_argument("--modes", nargs="+", default=["pixels", "refs"], choices=("pixels", "refs"))
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ragym_bench_host_memory"
    )
    parser.add_argument("--child", choices=("pixels", "refs"), help=argparse.SUPPRESS)
    parser.add_argument("--kb", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--policy", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("WANDB_MODE", "disabled")
    if args.child:
        return _child(args)
    args.workdir.mkdir(parents=True, exist_ok=True)
    kb, policy = _inputs(args.workdir, None)
    print(
        f"toy run: {args.recipe}, {args.steps} steps of {args.batch} rows x {args.n} episodes, each mode in a fresh process"
    )
    results = {}
    for mode in args.modes:
        command = [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--kb",
            str(kb),
            "--policy",
            str(policy),
            "--recipe",
            args.recipe,
            "--steps",
            str(args.steps),
            "--batch",
            str(args.batch),
            "--n",
            str(args.n),
            "--workdir",
            str(args.workdir),
        ]
        done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    for mode, r in results.items():
        slope = _slope(r["rss"], args.warm_steps)
        verdict = "within" if slope <= GOAL_BYTES_PER_STEP else "over"
        print(
            f"{mode:>6}: RSS {r['rss'][0] / 1e6:,.0f} MB after step 1 -> {r['rss'][-1] / 1e6:,.0f} MB after step "
            f"{len(r['rss'])}; growth {slope / 1e6:+.3f} MB/step over steps {args.warm_steps + 1}..{len(r['rss'])} "
            f"({verdict} the 1 MB/step goal)"
        )
        print("        RSS after each step (MB): " + " ".join(f"{v / 1e6:.1f}" for v in r["rss"]))
        per_traj = r["pickled"] / r["trajectories"]
        print(
            f"        batch pickled: {per_traj / 1e3:,.1f} kB per trajectory, image payload {r['payload'] / r['trajectories'] / 1e3:,.1f} kB; "
            f"{r['images'] / r['trajectories']:.2f} images per trajectory"
            + (
                f", {r['ref_bytes'] / r['images']:.0f} B per reference in the batch (paths and budgets shared), "
                f"{r['ref_alone']} B alone"
                if r["ref_bytes"]
                else ""
            )
        )
    _extrapolate(args, results)


def _extrapolate(args: argparse.Namespace, results: dict) -> None:
    """The bytes one step's batch carries at the paper's batch and ``--budget-recipe``'s image budget."""
    query, candidate, num_query, num_candidates = _budget(args.budget_recipe)
    trajectories = args.prompts * args.samples
    pixels = (num_query * query + num_candidates * candidate) * trajectories  # pixels a step's batch shows
    per_ref = results["refs"]["ref_alone"] if "refs" in results else float("nan")
    per_pixel = next(iter(results.values()))["pixel_values_per_pixel"]
    print(
        f"at {args.prompts:,} prompts x {args.samples} samples = {trajectories:,} trajectories, {args.budget_recipe}'s "
        f"budget ({num_query} query image of {query:,} px + {num_candidates} candidates of {candidate:,} px each):"
    )
    print(f"  pixels (uint8 RGB): {_gb(3 * pixels)} per step")
    print(
        f"  references:         {_gb(per_ref * (num_query + num_candidates) * trajectories)} per step "
        f"({per_ref:.0f} B each, the largest reference pickled alone); {3 * pixels / (per_ref * (num_query + num_candidates) * trajectories):,.0f}x fewer"
    )
    print(
        f"  verl's pixel_values (float32, {per_pixel:.1f} B per pixel): {_gb(per_pixel * pixels)} per step, "
        "in verl's batch (multi_modal_inputs), not ragym's hop"
    )


if __name__ == "__main__":
    main()
