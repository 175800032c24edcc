"""The toy warm start, a short local-engine run and a toy verl run with ragym's threads and priorities against the
libraries' defaults, idle and beside a busy co-tenant.

The defaults, what ragym ran with before: torch's one intra-op OpenMP thread per core, OpenMP's default wait
policy (an idle thread spins a while before it sleeps) and Ray's worker niceness of 15. ragym's now: the passive
wait policy, asked for by the ``ragym`` command before torch loads (``ragym.rl.cli.prepare_process``), one
intra-op thread (``ragym.envs.retrieval.search_settings.plan_torch_threads``) and Ray workers at niceness 0
(``ragym.rl.verl_plugin.verl_local.WORKER_NICENESS_ENV``). Every window is a fresh process (OpenMP reads the wait
policy when torch loads) set up as the ``ragym`` command sets itself up; the baseline's process gets
``OMP_NUM_THREADS`` = the cores, an empty ``OMP_WAIT_POLICY`` (ragym leaves a set one alone, OpenMP reads an
empty one as unset) and ``RAY_worker_niceness=15``. Settings alternate window by window, in each of two phases:
``idle`` (nothing of ours besides; the machine may be shared, so each window prints the load average) and
``co-tenant`` (``--cotenants`` CPU-bound processes, each bounded in time).

Workloads, as users run them:
- ``warm``: ``ragym.rl.tiny.warm.warm_start`` on the KB-VQA toy rows, as ``ragym train --engine verl --toy``
  builds its policy, with ``--passes`` passes instead of 48 (every pass costs the same).
- ``local``: ``ragym train --recipe kbvqa_tiny_cpu`` for ``--steps`` GRPO steps on the toy rows from that
  policy, the whole command timed. The recipe sets ``ragym.engine.num_threads: 1``, so there only the wait
  policy differs.
- ``verl``: ``ragym train --engine verl --recipe kbvqa_qwen2_5_vl_7b --toy OUT`` for ``--steps`` steps from that
  policy into a fresh checkpoint folder, the whole command timed (Ray's start-up included). Ray gives each of its
  workers one thread either way (``$OMP_NUM_THREADS`` = the CPUs it reserves, none; 1 at least), so the
  baseline's ``OMP_NUM_THREADS`` is left out here: the wait policy and the workers' niceness differ.

Usage: ``python benchmarks/training_threads.py [--out runs/training_threads] [--passes 4] [--steps 2] [--rounds 2]
[--cotenants 2] [--workloads warm local verl] [--settings defaults ragym "passive, a thread per core" "spinning,
one thread"]``. The toy rows and the policies are built in ``--out`` once. Last line: ``ratio=<defaults seconds /
ragym seconds>`` of the warm start beside the co-tenant (> 1: ragym's settings are faster).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECIPE = "kbvqa_qwen2_5_vl_7b"
"""The README's toy line trains this recipe; its toy rows are KB-VQA's."""
RESULT = "training_threads seconds: "
"""What a window's process prints before its workload's seconds (its logs may share stdout)."""
LOCAL_RECIPE = "kbvqa_tiny_cpu"
"""The local engine's KB-VQA recipe (the CPU demo's)."""
SETTINGS = {
    "defaults": {"OMP_NUM_THREADS": "{cores}", "OMP_WAIT_POLICY": "", "RAY_worker_niceness": "15"},
    "ragym": {},
    "passive, a thread per core": {"OMP_NUM_THREADS": "{cores}"},
    "spinning, one thread": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": ""},
}
"""Environment of each setting's process, over the caller's with these variables removed; the last two take one
half of ragym's threads each."""
VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "RAY_worker_niceness")


def prepare(out: Path) -> tuple[Path, Path]:
    """The KB-VQA toy rows and an untrained tiny policy in ``out`` (built once); returns (rows, policy)."""
    from ragym.data_prep.toy_data import toy_rows
    from ragym.rl.tiny.policy import build_tiny_policy

    data = toy_rows("KBVQA-v0", out / "KBVQA-v0")
    policy = out / "policy" / "random"
    if not (policy / "config.json").is_file():
        build_tiny_policy("qwen2_5_vl", policy, seed=0)
    return data, policy


def child_warm(out: Path, passes: int) -> float:
    """Seconds of ragym's toy warm start for ``passes`` passes (0: its own schedule, into the folder ``--toy out``
    reads, which ``local`` and ``verl`` train from), in a process set up as ``ragym train`` is."""
    from ragym.rl.cli import prepare_process

    prepare_process("train")
    import pandas as pd

    from ragym.rl.recipe.check import check_recipe
    from ragym.rl.recipe.compose import resolve_recipe_path
    from ragym.rl.recipe.platforms import merge_overrides, platform_overrides
    from ragym.rl.tiny.warm import warm_start

    data, policy = prepare(out)
    overrides = merge_overrides(platform_overrides("cpu"), platform_overrides("toy"))
    config = check_recipe(resolve_recipe_path(RECIPE), overrides, validate=False)
    rows = pd.read_parquet(data / "train.parquet").to_dict("records")
    start = time.perf_counter()
    dest = out / "scratch" / "warm" if passes else out / "policy" / "KBVQA-v0"  # where --toy OUT looks
    warm_start(policy, rows, config, dest, epochs=passes or None)
    return time.perf_counter() - start


def child_local(out: Path, steps: int) -> float:
    """Seconds of ``ragym train --recipe kbvqa_tiny_cpu`` for ``steps`` steps (a fresh run folder each time)."""
    from ragym.rl.cli import main

    data = out / "KBVQA-v0" / "data"
    policy = out / "policy" / "KBVQA-v0"  # built once by a warm window of the full schedule
    run = out / "scratch" / "local"
    shutil.rmtree(run, ignore_errors=True)
    argv = [
        "train",
        "--recipe",
        LOCAL_RECIPE,
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'test.parquet'}",
        f"actor_rollout_ref.model.path={policy}",
        f"trainer.total_training_steps={steps}",
        f"trainer.default_local_dir={run}",
        "trainer.logger=[console]",
        "trainer.save_freq=-1",
    ]
    start = time.perf_counter()
    if main(argv) != 0:
        raise RuntimeError("ragym train failed")
    return time.perf_counter() - start


def child_verl(out: Path, steps: int) -> float:
    """Seconds of ``ragym train --engine verl --toy out`` for ``steps`` steps into a fresh checkpoint folder."""
    from ragym.rl.cli import main

    run = out / "scratch" / "verl"
    shutil.rmtree(run, ignore_errors=True)
    argv = [
        "train",
        "--engine",
        "verl",
        "--recipe",
        RECIPE,
        "--toy",
        str(out),
        f"trainer.default_local_dir={run}",
        f"trainer.total_training_steps={steps}",
    ]
    start = time.perf_counter()
    if main(argv) != 0:
        raise RuntimeError("ragym train --engine verl failed")
    return time.perf_counter() - start


WORKLOADS = {"warm": child_warm, "local": child_local, "verl": child_verl}
"""Each workload's function, run in a window's own process: (out, passes or steps) -> seconds."""


def window(
    args: argparse.Namespace, workload: str, setting: str, passes: int | None = None
) -> tuple[float, float, str]:
    """(wall seconds of the workload, CPU seconds of its whole process, its torch threads and OpenMP wait policy)
    in a fresh process of ``setting``."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update({k: v.format(cores=len(os.sched_getaffinity(0))) for k, v in SETTINGS[setting].items()})
    if workload == "verl" and setting == "defaults":
        env.pop(
            "OMP_NUM_THREADS"
        )  # before, too, Ray gave each worker one thread (Ray keeps a value that is set)
    env.update({"WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            workload,
            "--out",
            str(args.out),
            "--passes",
            str(args.passes if passes is None else passes),
            "--steps",
            str(args.steps),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{workload} / {setting} failed:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    seconds, threads, policy = done.stdout.split(RESULT)[-1].split()[:3]
    return float(seconds), cpu, f"{threads} thread(s), {policy}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "training_threads")
    parser.add_argument("--passes", type=int, default=4, help="warm-start passes over the 16 toy rows")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps of local and verl")
    parser.add_argument("--rounds", type=int, default=2, help="windows of each setting per phase")
    parser.add_argument("--cotenants", type=int, default=2, help="CPU-bound co-tenant processes")
    parser.add_argument("--workloads", nargs="+", default=["warm", "local"], choices=list(WORKLOADS))
    parser.add_argument("--settings", nargs="+", default=["defaults", "ragym"], choices=list(SETTINGS))
    parser.add_argument("--child", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = args.out.resolve()
    if args.child:
        seconds = WORKLOADS[args.child](args.out, args.passes if args.child == "warm" else args.steps)
        import torch

        from ragym.envs.retrieval.search_settings import wait_policy

        print(f"{RESULT}{seconds:.3f} {torch.get_num_threads()} {wait_policy()}")
        return
    from benchmarks.retrieval_service import cotenants

    if {"local", "verl"} & set(args.workloads) and not (
        args.out / "policy" / "KBVQA-v0" / "config.json"
    ).is_file():
        window(args, "warm", "ragym", passes=0)  # the policy the toy run trains (built once)
    cores = len(os.sched_getaffinity(0))
    print(
        f"{cores} cores; settings: "
        + "; ".join(f"{name} {SETTINGS[name] or '(none)'}" for name in args.settings)
    )
    results: dict[tuple[str, str, str], list[float]] = {}
    for phase, count in (("idle", 0), (f"co-tenant x{args.cotenants}", args.cotenants)):
        budget = 1800.0 * args.rounds * len(args.settings) * len(args.workloads)
        with cotenants(count, budget) if count else nullcontext():
            for _ in range(args.rounds):
                for workload in args.workloads:
                    for setting in args.settings:
                        load = os.getloadavg()[0]
                        seconds, cpu, threads = window(args, workload, setting)
                        results.setdefault((phase, workload, setting), []).append(seconds)
                        print(
                            f"[{phase}] {workload} {setting} ({threads}): {seconds:.1f} s (process CPU "
                            f"{cpu:.1f} s, load {load:.1f} before)",
                            flush=True,
                        )
    mean = {key: sum(times) / len(times) for key, times in results.items()}
    for (phase, workload, setting), times in results.items():
        ratio = mean[(phase, workload, args.settings[0])] / mean[(phase, workload, setting)]
        print(
            f"{phase:>14} {workload:>5} {setting:>28}: mean {mean[(phase, workload, setting)]:6.1f} s "
            f"{[round(t, 1) for t in times]}, {args.settings[0]} / this = {ratio:.2f}"
        )
    busy = (f"co-tenant x{args.cotenants}", "warm")
    if "warm" in args.workloads and {"defaults", "ragym"} <= set(args.settings):
        print(f"ratio={mean[(*busy, 'defaults')] / mean[(*busy, 'ragym')]:.3f}")


if __name__ == "__main__":
    main()
