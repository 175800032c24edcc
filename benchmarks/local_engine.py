"""Where a local-engine GRPO step spends its time: generation, env, reward, update, and the agent loop itself.

    python benchmarks/local_engine.py [--steps 3] [--workdir DIR] [--model DIR] [--shadow-size 512x8]

Runs GRPO steps of the CPU demo recipe on the synthetic demo KB with a tiny policy: ``--model``, or one
briefly warm-started by ``ragym.rl.demo.run.prepare`` in ``--workdir`` (built once, ~30 s), so that episodes are
multi-turn as in the demo (an untrained policy rarely gets past its first turn).

What is measured, and how:
- generation: the server's batched prefill + decode (its own wall-clock counter), no batching waits.
- env: thread CPU time inside the env (construction, ``reset``, ``step``, ``close``), on any thread.
- agent loop: thread CPU time the agent loop's own code runs (token assembly, masking, image bookkeeping,
  decoding turns), on the event loop between awaits and in executor threads, minus the env's and the
  server's request handling inside it. Measured at the code, not as a residual.
- residual: rollout wall time minus generation, env, reward and agent loop: scheduling, the server's wait for
  every live episode (``ragym.engine.batch_wait_s``), thread hand-offs; slightly negative when executor
  threads' CPU overlaps generation on another core. The old residual estimate of the agent loop
  (rollout - generation - env - reward) is printed too.
``--shadow-size HIDDENxLAYERS`` also times, batch for batch, a random-weight policy of that size doing the
same generation work (same prompts, images and generated tokens, teacher-forced), and prints the overhead
against that generation time. The last line is ``overhead=<agent loop / generation>`` for the run's policy.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ragym.rl.agent_loop.loop  # noqa: E402
from benchmarks.local_engine_probes import CpuClock, ShadowGenerator  # noqa: E402
from ragym.rl.train import build_trainer  # noqa: E402


class TimedEnv:
    """Proxy that charges the env's own CPU time (``reset``/``step``/``close``) to the clock's env bucket."""

    def __init__(self, env, clock: CpuClock):
        self._env, self._clock = env, clock

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, **kwargs):
        return self._clock.call("env", self._env.reset, **kwargs)

    def step(self, action):
        return self._clock.call("env", self._env.step, action)

    def close(self):
        return self._clock.call("env", self._env.close)


WARM_START = ["ragym.demo.warm_start.num_episodes=64", "ragym.demo.warm_start.epochs=2"]
"""The default policy's warm start: short, but enough for multi-turn episodes (an untrained policy rarely gets
past its first turn and fills its token budget, which would make generation look huge)."""


def local_run_overrides(policy: Path, kb: Path, out: Path, steps: int) -> list[str]:
    """The recipe overrides of a benchmark's short local-engine run: ``policy`` on ``kb``'s rows for ``steps`` GRPO
    steps into ``out``, with no logger, checkpoint or resume."""
    return [
        f"actor_rollout_ref.model.path={policy}",
        f"data.train_files={kb}/data/train.parquet",
        f"data.val_files={kb}/data/test.parquet",
        f"trainer.default_local_dir={out}",
        "trainer.logger=[]",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
    ]


def _inputs(workdir: Path, model: str | None) -> tuple[Path, Path]:
    """The demo KB and the policy: ``model``, or a briefly warm-started tiny policy built by ``ragym.rl.demo.run``."""
    if not (workdir / "warm_start" / "warm_start.json").exists():  # written last: everything else exists
        # In a child process: the warm start leaves a large heap whose garbage collections would be charged
        # to whatever code runs next (the agent loop, measured on a first run at 5x its steady cost).
        code = f"from pathlib import Path; from ragym.rl.demo.run import prepare; prepare(Path({str(workdir)!r}), 0, extra_overrides={WARM_START!r})"
        subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
    return workdir / "kb", Path(model) if model else workdir / "warm_start"


def _instrument(trainer, clock: CpuClock) -> None:
    """Route the agent loop's episodes, executor calls, env and server requests through ``clock``."""
    make_env = ragym.rl.agent_loop.loop.make_env
    ragym.rl.agent_loop.loop.make_env = lambda *a, **k: TimedEnv(clock.call("env", make_env, *a, **k), clock)
    agent_loop, server = trainer.agent_loop, trainer.server
    run, generate = agent_loop.run, server.generate
    agent_loop.run = lambda *a, **k: clock.coroutine("agent_loop", run(*a, **k))
    server.generate = lambda *a, **k: clock.coroutine("server_request", generate(*a, **k))
    run_in_executor = trainer.loop.run_in_executor
    trainer.loop.run_in_executor = lambda executor, fn, *args: run_in_executor(
        executor, clock.wrap("agent_loop", fn), *args
    )


def _print(sums: dict[str, float], cpu: dict[str, float], num_steps: int, num_turns: int, shadow) -> None:
    step = sums["rollout"] + sums["update"]
    loop, generate = cpu["agent_loop"], sums["generate"]
    residual = sums["rollout"] - generate - cpu["env"] - sums["reward"] - loop
    old_residual = sums["rollout"] - generate - cpu["env"] - sums["reward"]
    rows = [
        ("generation", generate),
        ("env", cpu["env"]),
        ("reward", sums["reward"]),
        ("agent_loop", loop),
        ("residual", residual),
        ("update", sums["update"]),
    ]
    for name, value in rows:
        print(f"{name:>10}: {value / num_steps:7.3f} s/step  ({value / step:5.1%} of the step)")
    print(f"      step: {step / num_steps:7.3f} s/step")
    print(
        f"turns/step={num_turns / num_steps:.1f} agent_loop_ms/turn={loop / num_turns * 1e3:.3f} "
        f"generation_ms/turn={generate / num_turns * 1e3:.3f} "
        f"server_request_ms/turn={cpu['server_request'] / num_turns * 1e3:.3f}"
    )
    print(
        f"old residual estimate (rollout - generation - env - reward): {old_residual / num_steps:.3f} s/step "
        f"= {old_residual / generate:.3f} of generation"
    )
    if shadow is not None:
        print(
            f"shadow policy {shadow.describe()}: generation {shadow.seconds / num_steps:.3f} s/step, "
            f"overhead vs it={loop / shadow.seconds:.3f}"
        )
    print(f"overhead={loop / generate:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ragym_bench_local_engine"
    )
    parser.add_argument("--model", help="policy directory (default: a briefly warm-started tiny policy)")
    parser.add_argument("--shadow-size", help="HIDDENxLAYERS of a larger policy to time on the same work")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("WANDB_MODE", "disabled")
    kb, policy = _inputs(args.workdir, args.model)
    out = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))
    trainer = build_trainer(
        "kbvqa_tiny_cpu",
        [
            *local_run_overrides(policy, kb, out, args.steps),
            "data.max_response_length=256",
        ],
    )
    clock = CpuClock()
    _instrument(trainer, clock)
    shadow = ShadowGenerator.attach(trainer.server, args.shadow_size) if args.shadow_size else None
    trainer.train_step()  # warm-up: first-call costs (image processor, allocator) are not per-step costs
    sums = dict.fromkeys(("generate", "reward", "update", "rollout"), 0.0)
    clock.reset()
    if shadow is not None:
        shadow.seconds = 0.0
    requests_before = trainer.server.stats.num_requests
    start = time.perf_counter()
    for _ in range(args.steps):
        trainer.train_step()
        for key in sums:
            sums[key] += trainer.last_times[key]
    wall = time.perf_counter() - start
    if shadow is not None:  # the shadow's replays ran inside the rollouts: not part of this policy's step
        sums["rollout"] -= shadow.seconds
        wall -= shadow.seconds
    num_turns = trainer.server.stats.num_requests - requests_before
    trainer.close()
    print(
        f"steps={args.steps} episodes/step={trainer.cfg.train_batch_size * trainer.cfg.rollout_n} "
        f"wall={wall / args.steps:.3f} s/step"
    )
    _print(sums, clock.totals(), args.steps, num_turns, shadow)


if __name__ == "__main__":
    main()
