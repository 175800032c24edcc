"""Where a local-engine GRPO step spends its time: generation, env, reward, update, and the agent loop itself.

    python benchmarks/local_engine.py [--steps 3] [--workdir DIR]

Runs GRPO steps of the CPU demo recipe on the synthetic demo KB with a tiny policy (built in ``--workdir``
if absent; a warm-started policy from ``ragym demo`` can be passed with ``--model``). The env is timed by
wrapping the agent loop's ``make_env`` (reset and step). The last line, ``overhead=<x>``, is the agent
loop's own work (token assembly, masking, image bookkeeping: rollout wall time minus generation, env and
reward time) as a share of generation time.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rl.agent_loop  # noqa: E402
from rl.engine.main import build_trainer  # noqa: E402


class TimedEnv:
    """Proxy that adds the wall time of ``reset``/``step`` to a shared counter."""

    total = 0.0

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, **kwargs):
        start = time.perf_counter()
        try:
            return self._env.reset(**kwargs)
        finally:
            TimedEnv.total += time.perf_counter() - start

    def step(self, action):
        start = time.perf_counter()
        try:
            return self._env.step(action)
        finally:
            TimedEnv.total += time.perf_counter() - start


def _inputs(workdir: Path, model: str | None) -> tuple[Path, Path]:
    from data_prep.synthetic_kb import PRESETS, build_kb
    from rl.tiny_policy import build_tiny_policy

    kb, policy = workdir / "kb", Path(model) if model else workdir / "tiny_policy"
    if not (kb / "kb.json").exists():
        build_kb(kb, PRESETS["demo"], seed=0, name="synthetic-demo")
    if not (policy / "config.json").exists():
        build_tiny_policy("qwen2_5_vl", policy, seed=0)
    return kb, policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ragym_bench_local_engine"
    )
    parser.add_argument("--model", help="policy directory (default: an untrained tiny policy)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("WANDB_MODE", "disabled")
    kb, policy = _inputs(args.workdir, args.model)
    make_env = rl.agent_loop.make_env
    rl.agent_loop.make_env = lambda *a, **k: TimedEnv(make_env(*a, **k))
    out = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))
    trainer = build_trainer("kbvqa_tiny_cpu", [
        f"actor_rollout_ref.model.path={policy}", f"data.train_files={kb}/data/train.parquet",
        f"data.val_files={kb}/data/test.parquet", f"trainer.default_local_dir={out}", "trainer.logger=[]",
        f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1", "trainer.resume_mode=disable",
        "data.max_response_length=256",
    ])  # fmt: skip
    trainer.train_step()  # warm-up: first-call costs (image processor, allocator) are not per-step costs
    sums = dict.fromkeys(("generate", "env", "reward", "update", "rollout"), 0.0)
    TimedEnv.total = 0.0
    for _ in range(args.steps):
        trainer.train_step()
        for key in sums:
            sums[key] += trainer.last_times[key]
    sums["env"] = TimedEnv.total  # reset + step, measured at the env itself
    trainer.close()
    n = args.steps
    agent_loop = sums["rollout"] - sums["generate"] - sums["env"] - sums["reward"]
    step = sums["rollout"] + sums["update"]
    print(f"steps={n} episodes/step={trainer.cfg.train_batch_size * trainer.cfg.rollout_n}")
    for name, value in [("generation", sums["generate"]), ("env", sums["env"]), ("reward", sums["reward"]),
                        ("agent_loop", agent_loop), ("update", sums["update"])]:  # fmt: skip
        print(f"{name:>10}: {value / n:7.3f} s/step  ({value / step:5.1%} of the step)")
    print(f"      step: {step / n:7.3f} s/step")
    print(f"overhead={agent_loop / sums['generate']:.3f}")


if __name__ == "__main__":
    main()
