"""Asynchronous rollouts against synchronous ones, on the local engine and on verl's trainer, with an injected
search latency.

    python benchmarks/async_rollouts.py [--engines local verl] [--steps 4] [--seeds 0 1] [--batch 2] [--n 4]
        [--latencies fixed heavy] [--verl-modes sync colocate_async separate_async] [--workdir DIR]

Every search an env sends goes to ``ragym serve --kb-dir KB`` on 127.0.0.1 (started once per engine, with its
defaults) through ``benchmarks/latency_proxy.py``, whose address is the recipe's ``ragym.retrieval.url``: the proxy
holds each search for an injected latency before it forwards it, as a slow service would, wherever the env runs (the
local engine's executor threads, verl's agent-loop workers): ``fixed``, every search ``--delay-s``; ``heavy``,
``--fast-s`` with a ``--slow-share`` of the searches ``--slow-factor`` x slower (a seeded draw); ``none`` (on
request), the service's own latency only.

``--engines local`` (the default): the CPU demo's KB-VQA run (``kbvqa_tiny_cpu`` on the synthetic demo KB) with the
briefly warm-started tiny policy of ``benchmarks/local_engine.py`` (built once in ``--workdir``, so that episodes
search). For each latency, seed and mode (sync: ``ragym.engine.async_rollouts=false``; async: ``true`` with
``trainer.v1.sampler.max_off_policy_threshold=2``), one fresh run of ``--steps`` GRPO steps at ``--batch`` rows x
``--n`` episodes, then a greedy evaluation on ``--val-rows`` held-out rows (not timed).

``--engines verl``: verl's own trainer, ``ragym train --engine verl --recipe kbvqa_qwen2_5_vl_7b --toy DIR`` (the
toy's tiny synthetic KB and warm-started policy, built once in ``--workdir``/verl_toy; ``tests/launch`` runs it the
same way) with ``trainer.v1.trainer_mode`` ``ragym`` (sync), ``ragym_colocate_async`` and ``ragym_separate_async``
(bound 2), the same steps, batch and latency, and verl's own evaluation after the last step (``trainer.test_freq``
= ``--steps``: ``val/reward/total`` on ``--val-rows`` held-out rows, greedy). verl's trainer and its Ray instance
listen on loopback only inside a private network namespace (``ragym train --network private``'s), which a service
started outside cannot reach, so the script runs its verl part again inside one (``unshare``; service, proxy and
trainers, the trainers with ``--network host``: the namespace's). Each run starts Ray, so it takes minutes on CPU.

Printed per run, then per latency and mode over the seeds:

- wall per step over all steps (an async mode's step 1 has nothing rolled out ahead) and over steps 2..N (the
  steady state a long run sees), and steps/s; verl: its ``timing_s/step`` (start-up and evaluation not included);
- trainer idle share: the share of the wall the trainer waited for its episodes (local sync: each step's rollout;
  local async: ``timing_s/rollout_wait``; verl: ``timing_s/gen``, sampling the step's batch, plus
  ``timing_s/switch_wait`` where separate_async waits to take its engine back);
- throughput: trained trajectories/s;
- staleness: trained trajectories per staleness value (local: each step's
  ``training/off_policy/trajectory_staleness/mean``; verl: each traced trajectory's own, ``traces/episodes.jsonl``,
  every group while the batch is within the recipe's ``ragym.verl.trace_groups_per_step``, 4);
- the learning curve: each step's mean training reward (``reward/total``), per run and per mode over the seeds;
- held-out reward after the steps: mean and spread (max - min) over the seeds.

The last lines per latency are the ratio async/sync of wall time (per async mode on verl) for each seed's pair of
runs (run back to back, so both see the same co-tenants' load; the median too) beside its ceiling (rolling out one
batch ahead hides the shorter of rollout and update behind the longer, so async gains at most sync's step over the
longer of the two: ``1 / max(idle, 1 - idle)`` of sync over its steady steps, with cores to spare), then of steps/s
over all runs (all steps and steady state), and the held-out reward difference beside the seeds' spread. Each seed's
runs rotate their order, so a co-tenant's load drifts into every mode.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.latency_proxy import DelayingProxy, Latency  # noqa: E402
from ragym.rl.core.metrics import METRICS_FILE, metrics_by_step, read_metrics  # noqa: E402
from ragym.rl.verl_plugin.verl_local import in_private_network, private_network_refusal  # noqa: E402

STALENESS = "training/off_policy/trajectory_staleness/mean"
VERL_MODES = {
    "sync": "ragym",
    "colocate_async": "ragym_colocate_async",
    "separate_async": "ragym_separate_async",
}
"""The benchmark's name of each of verl's trainer modes -> ``trainer.v1.trainer_mode`` (ragym's, with its metrics)."""
VERL_WAIT_KEYS = ("timing_s/gen", "timing_s/switch_wait")
"""verl's timers of a step's wait for episodes: sampling the batch (in sync mode, the whole rollout) and
separate_async's wait for enough finished groups before it takes the engine back (absent where it does not switch)."""


@dataclass
class Run:
    """One run's figures."""

    step_s: list[float]
    idle_s: list[float]
    """Each step's wait for its episodes."""
    trajectories: int
    rewards: list[float] = field(default_factory=list)
    """Each step's mean training reward (``reward/total`` of the trajectories it trained on): the learning curve."""
    staleness: Counter = field(default_factory=Counter)
    val_reward: float = 0.0
    num_searches: int = 0

    @property
    def wall(self) -> float:
        return sum(self.step_s)

    @property
    def steady_wall(self) -> float:
        """Steps 2..N: step 1's one-off costs left out (an async mode's step 1 has nothing rolled out ahead)."""
        return sum(self.step_s[1:])


def _serve(kb: Path) -> tuple[subprocess.Popen, str]:
    """``ragym serve`` on the KB, on a free loopback port, once ready."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ragym = Path(sys.executable).parent / "ragym"
    process = subprocess.Popen(
        [str(ragym), "serve", "--kb-dir", str(kb), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/ready")
            if conn.getresponse().status == 200:
                return process, f"http://127.0.0.1:{port}"
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"ragym serve exited with {process.returncode}")
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("ragym serve was not ready in 300 s")


def _run(args: argparse.Namespace, kb: Path, policy: Path, url: str, mode: str, seed: int) -> Run:
    # Imported here: the verl part's processes never load the local engine (a minute of imports under load).
    from benchmarks.local_engine import local_run_overrides
    from ragym.rl.train import build_trainer

    out = Path(tempfile.mkdtemp(prefix=f"{mode}-{seed}-", dir=args.workdir))
    trainer = build_trainer(
        args.recipe,
        [
            *local_run_overrides(policy, kb, out, args.steps),
            "data.max_response_length=256",
            f"data.seed={seed}",
            f"data.train_batch_size={args.batch}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
            f"actor_rollout_ref.rollout.n={args.n}",
            f"data.val_max_samples={args.val_rows}",
            f"ragym.retrieval.url={url}",
            f"ragym.engine.async_rollouts={str(mode == 'async').lower()}",
            "trainer.v1.sampler.max_off_policy_threshold=2",
        ],
    )
    run = Run(step_s=[], idle_s=[], trajectories=0)
    for _ in range(args.steps):
        start = time.perf_counter()
        metrics = trainer.train_step()
        run.step_s.append(time.perf_counter() - start)
        run.idle_s.append(metrics["timing_s/rollout_wait" if mode == "async" else "timing_s/rollout"])
        episodes = args.batch * args.n
        run.trajectories += episodes
        run.staleness[round(metrics.get(STALENESS, 0.0))] += episodes
        run.rewards.append(metrics["reward/total"])
    run.val_reward = trainer.evaluate()["reward/total"]
    trainer.close()
    return run


def _describe(runs: list[Run]) -> dict[str, float]:
    """A mode's figures over its runs (totals over the runs, so a slow run weighs as its seconds do)."""
    wall, steps = sum(r.wall for r in runs), sum(len(r.step_s) for r in runs)
    steady_wall = sum(r.steady_wall for r in runs)
    steady = steady_wall / (steps - len(runs))
    rewards = [r.val_reward for r in runs]
    return {
        "step_s": wall / steps,
        "steady_step_s": steady,
        "steps_per_s": steps / wall,
        "steady_steps_per_s": 1 / steady,
        "idle": sum(sum(r.idle_s) for r in runs) / wall,
        "steady_idle": sum(sum(r.idle_s[1:]) for r in runs) / steady_wall,
        "traj_per_s": sum(r.trajectories for r in runs) / wall,
        "val_reward": float(np.mean(rewards)),
        "val_spread": float(max(rewards) - min(rewards)),
    }


def _verl_run(args: argparse.Namespace, url: str, mode: str, seed: int) -> Run:
    """One fresh run of verl's trainer in ``mode`` (``ragym train --engine verl --toy``, as a user runs it), its
    held-out reward from verl's evaluation after the last step (``val/reward/total``: greedy, ``--val-rows``)."""
    out = Path(tempfile.mkdtemp(prefix=f"verl-{mode}-{seed}-", dir=args.workdir))
    # The namespace this runs in is private already (main): the trainer's Ray instance joins it, beside the service.
    command = [
        sys.executable,
        "-m",
        "ragym.rl.cli",
        "train",
        "--engine",
        "verl",
        "--recipe",
        args.verl_recipe,
        "--toy",
        str(args.workdir / "verl_toy"),
        "--network",
        "host",
        f"trainer.v1.trainer_mode={VERL_MODES[mode]}",
        "trainer.v1.sampler.max_off_policy_threshold=2",
        f"trainer.default_local_dir={out}",
        f"trainer.total_training_steps={args.steps}",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"trainer.test_freq={args.steps}",
        f"data.val_max_samples={args.val_rows}",
        f"data.seed={seed}",
        f"data.train_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.rollout.n={args.n}",
        f"ragym.retrieval.url={url}",
    ]
    log = out / "train.log"
    with log.open("w") as f:
        code = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise SystemExit(f"verl {mode} seed={seed} failed ({code}); log {log}:\n{tail}")
    return _read_verl_run(out, args)


def _read_verl_run(out: Path, args: argparse.Namespace) -> Run:
    """A finished verl run's figures, from its folder: its step metrics and the trace."""
    log = out / "train.log"
    metrics = metrics_by_step(read_metrics(out / METRICS_FILE))
    if sorted(metrics) != list(range(1, args.steps + 1)):
        raise SystemExit(f"steps logged {sorted(metrics)}, not 1..{args.steps}; log {log}")
    run = Run(
        step_s=[metrics[s]["timing_s/step"] for s in sorted(metrics)],
        idle_s=[sum(metrics[s].get(key, 0.0) for key in VERL_WAIT_KEYS) for s in sorted(metrics)],
        trajectories=args.steps * args.batch * args.n,
        rewards=[metrics[s]["reward/total"] for s in sorted(metrics)],
    )
    # Each trained trajectory's own staleness, from the trace (every group while the batch is within
    # ragym.verl.trace_groups_per_step, the recipe's 4).
    traced = [json.loads(line) for line in (out / "traces" / "episodes.jsonl").read_text().splitlines()]
    run.staleness = Counter(r["staleness"] for r in traced)
    run.val_reward = metrics[args.steps]["val/reward/total"]
    return run


def _print_run(label: str, mode: str, seed: int, run: Run) -> None:
    print(
        f"{label:>5} {mode:>5} seed={seed} steps_s={[round(s, 2) for s in run.step_s]} "
        f"idle={sum(run.idle_s) / run.wall:.2f} searches={run.num_searches} "
        f"staleness={dict(sorted(run.staleness.items()))} rewards={[round(r, 3) for r in run.rewards]} "
        f"val_reward={run.val_reward:.3f}",
        flush=True,
    )


def _report(label: str, runs: dict[str, list[Run]]) -> None:
    """Per mode over the seeds, then each async mode's ratio over sync (the first mode)."""
    figures = {mode: _describe(r) for mode, r in runs.items()}
    for mode, f in figures.items():
        print(
            f"{label:>5} {mode:>5}: {f['step_s']:.2f} s/step ({f['steady_step_s']:.2f} steady), "
            f"{f['steps_per_s']:.3f} steps/s, idle {f['idle']:.0%} ({f['steady_idle']:.0%} steady), "
            f"{f['traj_per_s']:.2f} traj/s, "
            f"held-out reward {f['val_reward']:.3f} (spread {f['val_spread']:.3f})"
        )
        curve = np.mean([r.rewards for r in runs[mode]], axis=0)
        print(
            f"{label:>5} {mode:>5} training reward per step (mean over seeds): "
            f"{' '.join(f'{v:.3f}' for v in curve)}"
        )
    sync = figures["sync"]
    for mode in [m for m in runs if m != "sync"]:
        stale = sum((r.staleness for r in runs[mode]), Counter())
        fast = figures[mode]
        print(f"{label:>5} {mode} staleness: {dict(sorted(stale.items()))} trajectories")
        # Each seed's runs ran back to back: their ratio sees the same co-tenants' load.
        pairs = [s.wall / a.wall for s, a in zip(runs["sync"], runs[mode], strict=True)]
        # One batch ahead hides the shorter of rollout and update behind the longer: sync's step over the longer
        # is the most it can gain, with cores to spare.
        # Over the steady steps: a first step's one-off costs (verl's sync pays the agent-loop workers' set-up there,
        # the async modes before step 1's timer) are neither rollout nor update.
        ceiling = 1 / max(sync["steady_idle"], 1 - sync["steady_idle"])
        steady_pairs = [s.steady_wall / a.steady_wall for s, a in zip(runs["sync"], runs[mode], strict=True)]
        print(
            f"{label:>5} ratio {mode}/sync per seed: {' '.join(f'{p:.2f}x' for p in pairs)} "
            f"(median {np.median(pairs):.2f}x; steady {' '.join(f'{p:.2f}x' for p in steady_pairs)}, "
            f"ceiling {ceiling:.2f}x)"
        )
        print(
            f"{label:>5} ratio {mode}/sync: steps/s {fast['steps_per_s'] / sync['steps_per_s']:.2f}x "
            f"(steady {fast['steady_steps_per_s'] / sync['steady_steps_per_s']:.2f}x), "
            f"traj/s {fast['traj_per_s'] / sync['traj_per_s']:.2f}x, held-out reward "
            f"{fast['val_reward'] - sync['val_reward']:+.3f} (spread sync {sync['val_spread']:.3f}, "
            f"{mode} {fast['val_spread']:.3f})"
        )


def _sweep(
    args: argparse.Namespace,
    settings: dict[str, tuple[float, float, float]],
    label: str,
    kb: Path,
    modes: list[str],
    run_one: Callable[[str, int, str], Run],
) -> None:
    """``ragym serve`` on ``kb`` behind the delaying proxy, then for each latency and seed one fresh run of every mode
    (``run_one(mode, seed, url)``), printed as it ends, then the latency's report. Each seed's runs start with
    another mode (sync first on seed 0), so a co-tenant's load drifts into every mode."""
    process, service = _serve(kb)
    try:
        with DelayingProxy(service) as proxy:
            print(
                f"{label.strip() or 'local'}: ragym serve at {service} (proxy {proxy.url}); steps={args.steps} "
                f"batch={args.batch}x{args.n} seeds={args.seeds} modes={modes}",
                flush=True,
            )
            for name in args.latencies:
                runs: dict[str, list[Run]] = {mode: [] for mode in modes}
                for seed in args.seeds:
                    shift = seed % len(modes)
                    for mode in modes[shift:] + modes[:shift]:
                        proxy.latency = Latency(*settings[name], seed=seed)
                        run = run_one(mode, seed, proxy.url)
                        run.num_searches = proxy.latency.num_searches
                        runs[mode].append(run)
                        _print_run(f"{label}{name}", mode, seed, run)
                _report(f"{label}{name}", runs)
    finally:
        process.kill()
        process.wait()


def _local(args: argparse.Namespace, settings: dict[str, tuple[float, float, float]]) -> None:
    """The local engine: sync and async per latency and seed."""
    from benchmarks.local_engine import _inputs

    kb, policy = _inputs(args.workdir, None)
    _sweep(
        args,
        settings,
        "",
        kb,
        ["sync", "async"],
        lambda mode, seed, url: _run(args, kb, policy, url, mode, seed),
    )


def _verl(args: argparse.Namespace, settings: dict[str, tuple[float, float, float]]) -> None:
    """verl's trainer in each of ``--verl-modes`` per latency and seed; runs inside the private network namespace,
    where the service, the proxy and the trainer's Ray instance all listen on its loopback."""
    from ragym.rl.recipe.compose import resolve_recipe_path
    from ragym.rl.recipe.platforms import merge_overrides, platform_overrides
    from ragym.rl.verl_plugin.verl_local import toy_overrides

    toy = args.workdir / "verl_toy"
    recipe = resolve_recipe_path(args.verl_recipe)
    # The toy's KB and warm-started policy, built once here (as the first ``ragym train --toy`` would), so the
    # service can serve the KB before any run starts and no run's time includes the build.
    toy_overrides(recipe, toy, merge_overrides(platform_overrides("cpu"), platform_overrides("toy")))
    modes = ["sync", *[m for m in args.verl_modes if m != "sync"]]
    print(f"verl: {args.verl_recipe} --toy", flush=True)
    _sweep(
        args,
        settings,
        "verl ",
        toy / "KBVQA-v0",
        modes,
        lambda mode, seed, url: _verl_run(args, url, mode, seed),
    )


def _verl_part_in_private_network(argv: list[str]) -> int:
    """Run this script's verl part (``argv`` plus ``--engines verl --in-namespace``) in a private network namespace
    (``ragym train --network private``'s own), so verl's workers reach the service and the proxy on loopback."""
    refusal = private_network_refusal()
    if refusal:
        raise SystemExit(f"--engines verl needs a private network namespace: {refusal}")
    command = in_private_network(
        [sys.executable, str(Path(__file__).resolve()), *argv, "--engines", "verl", "--in-namespace"],
        "ragym-bench",
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}  # as run_verl sets it: nothing outside can reach Ray
    # Ray's raylet waits a fixed window for its dashboard agent to write its port files; beside CPU-bound work (two
    # busy processes on 2 cores) the agent's imports took 50 s and two runs died at Ray's start-up. Ray's setting for
    # an agent's start-up, asked for longer (one already set wins); not shown to govern that wait: the run that then
    # started had its agent up in 3 s.
    env.setdefault("RAY_agent_register_timeout_ms", "300000")
    return subprocess.run(command, env=env, check=False).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["local"], choices=("local", "verl"))
    parser.add_argument(
        "--recipe", default="kbvqa_tiny_cpu", help="the local engine's recipe (a name or a path)"
    )
    parser.add_argument(
        "--verl-recipe", default="kbvqa_qwen2_5_vl_7b", help="verl's recipe, trained at toy size"
    )
    parser.add_argument(
        "--verl-modes",
        nargs="+",
        default=list(VERL_MODES),
        choices=list(VERL_MODES),
        help="verl's trainer modes (sync always runs: the baseline)",
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--batch", type=int, default=2, help="data.train_batch_size (rows per step)")
    parser.add_argument("--n", type=int, default=4, help="actor_rollout_ref.rollout.n (episodes per row)")
    parser.add_argument("--val-rows", type=int, default=8)
    parser.add_argument("--delay-s", type=float, default=0.5, help="fixed latency of every search")
    parser.add_argument("--fast-s", type=float, default=0.1, help="heavy-tailed latency: the usual search")
    parser.add_argument(
        "--slow-share", type=float, default=0.05, help="heavy-tailed latency: share of slow ones"
    )
    parser.add_argument(
        "--slow-factor", type=float, default=20.0, help="heavy-tailed latency: how much slower"
    )
    parser.add_argument(
        "--latencies", nargs="+", default=["fixed", "heavy"], choices=("none", "fixed", "heavy")
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ragym_bench_async_rollouts"
    )
    parser.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("WANDB_MODE", "disabled")
    args.workdir.mkdir(parents=True, exist_ok=True)
    settings = {
        "none": (0.0, 0.0, 1.0),
        "fixed": (args.delay_s, 0.0, 1.0),
        "heavy": (args.fast_s, args.slow_share, args.slow_factor),
    }
    if args.in_namespace:
        _verl(args, settings)
        return
    if "local" in args.engines:
        _local(args, settings)
    if "verl" in args.engines:
        sys.stdout.flush()
        code = _verl_part_in_private_network(sys.argv[1:])
        if code != 0:
            raise SystemExit(f"the verl part exited with {code}")


if __name__ == "__main__":
    main()
