"""Asynchronous rollouts against synchronous ones on the local engine, with an injected search latency.

    python benchmarks/async_rollouts.py [--steps 4] [--seeds 0 1] [--batch 2] [--n 4] [--workdir DIR]

The CPU demo's KB-VQA run (``kbvqa_tiny_cpu`` on the synthetic demo KB) with the briefly warm-started tiny policy of
``benchmarks/local_engine.py`` (built once in ``--workdir``, so that episodes search), its searches going through
``ragym serve --kb-dir KB`` on 127.0.0.1 (started once, with its defaults; the recipe's ``ragym.retrieval.url``).
Every search an env sends first waits an injected latency, in the env's executor thread, as a slow service would
hold it (the client's ``batch_search``): ``fixed``, every search ``--delay-s``; ``heavy``, ``--fast-s`` with a
``--slow-share`` of the searches ``--slow-factor`` x slower (a seeded draw); ``none`` (on request), the service's
own latency only. For each latency, seed and mode (sync:
``ragym.engine.async_rollouts=false``; async: ``true`` with ``trainer.v1.sampler.max_off_policy_threshold=2``), one
fresh run of ``--steps`` GRPO steps at ``--batch`` rows x ``--n`` episodes, then a greedy evaluation on
``--val-rows`` held-out rows (not timed). Printed per run, then per latency and mode over the seeds:

- wall per step over all steps (async's step 1 has nothing rolled out ahead and is synchronous) and over steps
  2..N (the steady state a long run sees), and steps/s;
- trainer idle share: the share of the wall the trainer waited for its episodes (sync: each step's rollout;
  async: ``timing_s/rollout_wait``);
- throughput: trained trajectories/s;
- staleness: trained trajectories per staleness value (``training/off_policy/trajectory_staleness``);
- held-out reward after the steps: mean and spread (max - min) over the seeds.

The last lines per latency are the ratio async/sync of wall time for each seed's pair of runs (run back to back, so
both see the same co-tenants' load; the median too) beside its ceiling (rolling out one batch ahead hides the shorter
of rollout and update behind the longer, so async gains at most sync's step over the longer of the two:
``1 / max(idle, 1 - idle)`` of sync, with cores to spare), then of steps/s over all runs (all steps and steady
state), and the held-out reward difference beside the seeds' spread. verl's async modes are not run here (each verl toy run is minutes of Ray start-up
on CPU; ``tests/launch/test_verl_async.py`` runs them). Runs alternate sync and async so a co-tenant's load drifts
into both.
"""

from __future__ import annotations

import argparse
import http.client
import logging
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.local_engine import _inputs  # noqa: E402
from ragym.envs.retrieval.service.client import ServiceRetriever  # noqa: E402
from ragym.rl.engine.main import build_trainer  # noqa: E402

STALENESS = "training/off_policy/trajectory_staleness/mean"


class InjectedLatency:
    """Holds every search the envs send to the service for a drawn delay first (the client side, in the env's
    executor thread); counts searches and the delay injected."""

    def __init__(self) -> None:
        self.base_s, self.slow_share, self.slow_factor = 0.0, 0.0, 1.0
        self.rng, self.lock = random.Random(0), threading.Lock()
        self.num_searches, self.injected_s = 0, 0.0
        original = ServiceRetriever.batch_search

        def delayed(retriever: ServiceRetriever, queries: list, k: int) -> list:
            time.sleep(self.draw())
            return original(retriever, queries, k)

        ServiceRetriever.batch_search = delayed

    def set(self, base_s: float, slow_share: float, slow_factor: float, seed: int) -> None:
        """The latency of the next run: ``base_s``, and ``slow_factor`` x that for a ``slow_share`` of searches."""
        self.base_s, self.slow_share, self.slow_factor = base_s, slow_share, slow_factor
        self.rng, self.num_searches, self.injected_s = random.Random(seed), 0, 0.0

    def draw(self) -> float:
        """One search's delay (seconds)."""
        with self.lock:
            slow = self.rng.random() < self.slow_share
            delay = self.base_s * (self.slow_factor if slow else 1.0)
            self.num_searches += 1
            self.injected_s += delay
        return delay


@dataclass
class Run:
    """One run's figures."""

    step_s: list[float]
    idle_s: float
    trajectories: int
    staleness: Counter = field(default_factory=Counter)
    val_reward: float = 0.0
    num_searches: int = 0

    @property
    def wall(self) -> float:
        return sum(self.step_s)


def _serve(kb: Path) -> tuple[subprocess.Popen, str]:
    """``ragym serve`` on the KB, on a free loopback port, once ready."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ragym = Path(sys.executable).parent / "ragym"
    process = subprocess.Popen([str(ragym), "serve", "--kb-dir", str(kb), "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
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
    out = Path(tempfile.mkdtemp(prefix=f"{mode}-{seed}-", dir=args.workdir))
    trainer = build_trainer(args.recipe, [
        f"actor_rollout_ref.model.path={policy}", f"data.train_files={kb}/data/train.parquet",
        f"data.val_files={kb}/data/test.parquet", f"trainer.default_local_dir={out}", "trainer.logger=[]",
        f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1", "trainer.resume_mode=disable",
        "data.max_response_length=256", f"data.seed={seed}", f"data.train_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}", f"actor_rollout_ref.rollout.n={args.n}",
        f"data.val_max_samples={args.val_rows}", f"ragym.retrieval.url={url}",
        f"ragym.engine.async_rollouts={str(mode == 'async').lower()}", "trainer.v1.sampler.max_off_policy_threshold=2",
    ])  # fmt: skip
    run = Run(step_s=[], idle_s=0.0, trajectories=0)
    for _ in range(args.steps):
        start = time.perf_counter()
        metrics = trainer.train_step()
        run.step_s.append(time.perf_counter() - start)
        run.idle_s += metrics["timing_s/rollout_wait" if mode == "async" else "timing_s/rollout"]
        episodes = args.batch * args.n
        run.trajectories += episodes
        run.staleness[round(metrics.get(STALENESS, 0.0))] += episodes
    run.val_reward = trainer.evaluate()["reward/total"]
    trainer.close()
    return run


def _describe(runs: list[Run]) -> dict[str, float]:
    """A mode's figures over its runs (totals over the runs, so a slow run weighs as its seconds do)."""
    wall, steps = sum(r.wall for r in runs), sum(len(r.step_s) for r in runs)
    steady = sum(sum(r.step_s[1:]) for r in runs) / (steps - len(runs))
    rewards = [r.val_reward for r in runs]
    return {
        "step_s": wall / steps, "steady_step_s": steady, "steps_per_s": steps / wall, "steady_steps_per_s": 1 / steady,
        "idle": sum(r.idle_s for r in runs) / wall, "traj_per_s": sum(r.trajectories for r in runs) / wall,
        "val_reward": float(np.mean(rewards)), "val_spread": float(max(rewards) - min(rewards)),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="kbvqa_tiny_cpu", help="the CPU demo's recipe (a name or a path)")
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("WANDB_MODE", "disabled")
    kb, policy = _inputs(args.workdir, None)
    latency = InjectedLatency()
    settings = {"none": (0.0, 0.0, 1.0), "fixed": (args.delay_s, 0.0, 1.0),
                "heavy": (args.fast_s, args.slow_share, args.slow_factor)}  # fmt: skip
    process, url = _serve(kb)
    print(f"ragym serve at {url}; steps={args.steps} batch={args.batch}x{args.n} seeds={args.seeds}")
    try:
        for name in args.latencies:
            runs: dict[str, list[Run]] = {"sync": [], "async": []}
            for seed in args.seeds:
                for mode in ("sync", "async") if seed % 2 == 0 else ("async", "sync"):
                    latency.set(*settings[name], seed=seed)
                    run = _run(args, kb, policy, url, mode, seed)
                    run.num_searches = latency.num_searches
                    runs[mode].append(run)
                    print(f"{name:>5} {mode:>5} seed={seed} steps_s={[round(s, 2) for s in run.step_s]} "
                          f"idle={run.idle_s / run.wall:.2f} searches={run.num_searches} "
                          f"staleness={dict(sorted(run.staleness.items()))} val_reward={run.val_reward:.3f}")  # fmt: skip
            figures = {mode: _describe(r) for mode, r in runs.items()}
            for mode, f in figures.items():
                print(f"{name:>5} {mode:>5}: {f['step_s']:.2f} s/step ({f['steady_step_s']:.2f} steady), "
                      f"{f['steps_per_s']:.3f} steps/s, idle {f['idle']:.0%}, {f['traj_per_s']:.2f} traj/s, "
                      f"held-out reward {f['val_reward']:.3f} (spread {f['val_spread']:.3f})")  # fmt: skip
            stale = sum((r.staleness for r in runs["async"]), Counter())
            sync, fast = figures["sync"], figures["async"]
            print(f"{name:>5} async staleness: {dict(sorted(stale.items()))} trajectories")
            # Each seed's sync and async runs ran back to back: their ratio sees the same co-tenants' load.
            pairs = [s.wall / a.wall for s, a in zip(runs["sync"], runs["async"], strict=True)]
            # One batch ahead hides the shorter of rollout and update behind the longer: sync's step over the longer
            # is the most it can gain, with cores to spare.
            ceiling = 1 / max(sync["idle"], 1 - sync["idle"])
            print(f"{name:>5} ratio async/sync per seed: {' '.join(f'{p:.2f}x' for p in pairs)} "
                  f"(median {np.median(pairs):.2f}x; ceiling {ceiling:.2f}x)")  # fmt: skip
            print(f"{name:>5} ratio async/sync: steps/s {fast['steps_per_s'] / sync['steps_per_s']:.2f}x "
                  f"(steady {fast['steady_steps_per_s'] / sync['steady_steps_per_s']:.2f}x), "
                  f"traj/s {fast['traj_per_s'] / sync['traj_per_s']:.2f}x, held-out reward "
                  f"{fast['val_reward'] - sync['val_reward']:+.3f} (spread sync {sync['val_spread']:.3f}, "
                  f"async {fast['val_spread']:.3f})")  # fmt: skip
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    main()
