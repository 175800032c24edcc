"""What recording episodes for ``ragym view`` costs a local-engine GRPO step: time and disk.

    python benchmarks/trace_cost.py [--pairs 4] [--groups 4] [--workdir DIR] [--model DIR]

Runs GRPO steps of the CPU demo recipe (the policy ``benchmarks/local_engine.py`` uses: ``--model`` or a
briefly warm-started tiny policy built once in ``--workdir``), alternating steps that record ``--groups``
groups with steps that record nothing (same trainer, same process, so drift hits both alike). Prints the
mean step time of each kind and their ratio, the recording call's own time (measured at the call, the
precise figure: step times of a sampling policy vary more than the recording costs), and bytes written
per traced step. The last line is ``ratio=<traced step / untraced step>``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.local_engine import _inputs, local_run_overrides  # noqa: E402
from ragym.rl.train import build_trainer  # noqa: E402
from ragym.rl.view.trace import TraceConfig  # noqa: E402


def _disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4, help="traced + untraced step pairs")
    parser.add_argument("--groups", type=int, default=4, help="groups recorded per traced step")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ragym_bench_local_engine"
    )
    parser.add_argument("--model", help="policy directory (default: a briefly warm-started tiny policy)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("WANDB_MODE", "disabled")
    kb, policy = _inputs(args.workdir, args.model)
    out = Path(tempfile.mkdtemp(prefix="trace-", dir=args.workdir))
    trainer = build_trainer(
        "kbvqa_tiny_cpu",
        [
            *local_run_overrides(policy, kb, out, 2 * args.pairs + 1),
            "data.max_response_length=256",
        ],
    )
    trainer.traces.cfg = TraceConfig(0)
    trainer.train_step()  # warm-up: first-call costs are not per-step costs
    times: dict[bool, list[float]] = {True: [], False: []}
    record_s, written = [], []
    for i in range(2 * args.pairs):
        traced = i % 2 == 0
        trainer.traces.cfg = TraceConfig(args.groups if traced else 0)
        before, start = _disk(out / "traces"), time.perf_counter()
        trainer.train_step()
        times[traced].append(time.perf_counter() - start)
        if traced:
            record_s.append(trainer.last_times["trace"])
            written.append(_disk(out / "traces") - before)
    trainer.close()
    on, off = statistics.mean(times[True]), statistics.mean(times[False])
    per_step = statistics.mean(record_s)
    episodes = args.groups * trainer.cfg.rollout_n
    print(f"episodes/step={trainer.cfg.train_batch_size * trainer.cfg.rollout_n} recorded/step={episodes}")
    print(f"step without recording: {off:.3f} s (mean of {len(times[False])}), with: {on:.3f} s")
    print(f"recording call: {per_step * 1e3:.1f} ms/step = {per_step / on:.2%} of a traced step")
    print(f"written: {statistics.mean(written) / 1024:.1f} KiB/step (first step includes its new images)")
    print(f"ratio={on / off:.3f}")


if __name__ == "__main__":
    main()
