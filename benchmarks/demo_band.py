"""Where the CPU demo lands, over seeds and CPU kernel settings: the table behind the README's band.

Runs ``ragym demo --out OUT/KERNEL/seed_S --seed S`` for every seed under each kernel setting (``machine``: what
torch picks on this CPU; ``avx2`` / ``default`` / ``avx512``: ``ATEN_CPU_CAPABILITY`` forced), ``--jobs`` demos at a
time (each on one thread), then prints one row per run (held-out reward and Ident. before -> after, the decision
margin, wall time, peak RSS), how many runs pass, and each figure's mean with its 95% interval per kernel setting
and over all runs. A run passes when both gains reach ``--min-gain`` (the verify task: the demo's RL gain) or, with
``--min-outcome`` (the answer task's default, 0.5), when its outcome on questions whose entity it confirmed reaches
that. A demo that exits with an error (a warm start that missed its target, a crash) is a row that fails, with the
last line of its log as the reason, and the other runs go on. A finished or failed run is read back, not run again
(delete its folder to run it again).

    python benchmarks/demo_band.py --out runs/band --seeds 0-9 --kernels machine avx2 default --jobs 2
    python benchmarks/demo_band.py --out runs/band_answer --task answer --seeds 0-9 --kernels machine

Each report also writes ``OUT/band.json``: this machine's name and kernels, and every run's figures. ``--merge``
adds such files from other machines to the report and to the band ``--write-band`` records (their runs labelled
with the machine's kernels): ``benchmarks/results/`` keeps those behind ragym's band.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

KERNELS = ("machine", "avx2", "default", "avx512")
"""Kernel settings: ``machine`` leaves ATen's choice alone, the others force ``ATEN_CPU_CAPABILITY``."""


def parse_seeds(text: str) -> list[int]:
    """``0-9`` or ``0,3,5`` -> the seeds.

    >>> parse_seeds("0-3"), parse_seeds("1,4")
    ([0, 1, 2, 3], [1, 4])
    """
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def run_env(kernel: str) -> dict[str, str]:
    """The environment of one demo under ``kernel``: one thread, no wandb, the kernel forced unless ``machine``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernel != "machine":
        env["ATEN_CPU_CAPABILITY"] = kernel
    return env


DEMO_COMMAND = [sys.executable, "-m", "ragym.rl.cli", "demo"]
"""The command each run starts, before its ``--out``, ``--seed``, ``--task`` and overrides."""
FAILED = "failed.json"
"""What a run that exited with an error leaves in its folder: its exit code, the reason and its time."""


def finished(folder: Path) -> bool:
    """Whether the run in ``folder`` ended: its ``metrics.json`` or its ``failed.json`` is there."""
    return (folder / "metrics.json").is_file() or (folder / FAILED).is_file()


def last_line(log: Path) -> str:
    """The last line of ``log`` with text on it: the one line ``ragym`` prints for an error it names."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(an empty log)"


def run_one(out: Path, kernel: str, seed: int, task: str, overrides: list[str]) -> Path:
    """One demo (skipped when it ended before); returns its folder, with ``failed.json`` in it where the demo
    exited with an error."""
    folder = out / kernel / f"seed_{seed}"
    if finished(folder):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        *DEMO_COMMAND,
        "--out",
        str(folder),
        "--seed",
        str(seed),
        "--task",
        task,
        *overrides,
    ]
    start = time.perf_counter()
    with open(folder.parent / f"seed_{seed}.log", "w") as log:
        process = subprocess.Popen(command, env=run_env(kernel), stdout=log, stderr=subprocess.STDOUT)
        # wait4: this demo's own CPU time, the wall time it needs on an idle core (it runs on one thread), however
        # busy the machine was while it ran.
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    cpu = {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.perf_counter() - start}
    if process.returncode != 0:
        reason = last_line(Path(log.name))
        (folder / FAILED).write_text(json.dumps({"exit": process.returncode, "reason": reason, **cpu}))
        print(
            f"{kernel} seed {seed}: FAILED (exit {process.returncode}): {reason}; see {log.name}", flush=True
        )
        return folder
    (folder / "cpu.json").write_text(json.dumps(cpu))
    print(f"{kernel} seed {seed}: done in {cpu['wall_s']:.0f}s wall, {cpu['cpu_s']:.0f}s CPU", flush=True)
    return folder


def row(folder: Path, min_gain: float, min_outcome: float | None = None) -> dict[str, Any]:
    """One run's figures from its metrics.json, or its failure (``failed``: the reason; it does not pass). It
    passes when its outcome on confirmed questions reaches ``min_outcome`` where that is set, else when both
    gains reach ``min_gain``."""
    if (folder / FAILED).is_file():
        failure = json.loads((folder / FAILED).read_text())
        return {"failed": failure["reason"], "cpu_s": failure["cpu_s"], "passes": False}
    metrics = json.loads((folder / "metrics.json").read_text())
    before, after = metrics["before"], metrics["after"]
    margin = metrics.get("decision_margin", {})
    figures = {
        "reward_before": before["reward_mean"],
        "reward_after": after["reward_mean"],
        "reward_gain": after["reward_mean"] - before["reward_mean"],
        "ident_before": before["ident_acc"],
        "ident_after": after["ident_acc"],
        "ident_gain": after["ident_acc"] - before["ident_acc"],
        "wall_s": metrics["wall_time_s"],
        "rss_mb": metrics["peak_rss_mb"],
    }
    if (folder / "cpu.json").is_file():
        figures["cpu_s"] = json.loads((folder / "cpu.json").read_text())["cpu_s"]
    warm = folder / "warm_start" / "warm_start.json"
    if warm.is_file():  # imitated again while it missed its target: ragym.demo.warm_start_target.restarts
        figures["warm_starts"] = len(json.loads(warm.read_text()).get("attempts") or [None])
    for phase in ("before", "after"):
        if margin:
            figures[f"p_confirm_{phase}"] = margin[phase]["confirm_match"]["mean"]
    if before.get("outcome_identified") is not None or after.get("outcome_identified") is not None:
        figures["outcome_confirmed_after"] = after.get("outcome_identified")
    if min_outcome is None:
        figures["passes"] = figures["reward_gain"] >= min_gain and figures["ident_gain"] >= min_gain
    else:
        outcome = figures.get("outcome_confirmed_after")
        figures["passes"] = outcome is not None and outcome >= min_outcome
    return figures


def interval(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% Student-t interval (None for one value)."""
    from ragym.rl.ablate.stats import mean_interval

    stats = mean_interval(values)
    return stats["mean"], stats["half_width"]


def machine_name() -> str:
    """This CPU's model name (``/proc/cpuinfo``), or the platform's processor where that is missing."""
    import platform

    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def kernel_label(kernel: str, capability: str) -> str:
    """What ``kernel`` ran as: ``machine`` is the CPU's own capability (``AVX512``, ``AVX2``)."""
    return capability.lower() if kernel == "machine" else kernel


def merged_runs(paths: list[Path]) -> dict[tuple[str, int], dict[str, Any]]:
    """The runs of other machines' ``band.json`` files, keyed ``("<machine>: <kernels>", seed)``."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"{path}: no such band.json")
        recorded = json.loads(path.read_text())
        if not isinstance(recorded, dict) or not {"machine", "capability", "runs"} <= set(recorded):
            raise SystemExit(f"{path}: not a band.json of demo_band.py (machine, capability, runs)")
        for key, figures in recorded["runs"].items():
            kernel, _, seed = key.rpartition("/")
            group = f"{recorded['machine']}: {kernel_label(kernel, recorded['capability'])}"
            if (group, int(seed)) in runs:
                raise SystemExit(f"{path}: {group} seed {seed} is in another merged file too")
            runs[(group, int(seed))] = figures
    return runs


def band_lines(runs: dict[tuple[str, int], dict[str, Any]], kernels: list[str]) -> list[str]:
    """Per kernel setting and over all runs: passes, and each figure's mean ± 95% half-width, min and max."""
    keys = [
        "reward_after",
        "reward_gain",
        "ident_after",
        "ident_gain",
        "p_confirm_before",
        "p_confirm_after",
        "outcome_confirmed_after",
        "wall_s",
        "cpu_s",
        "rss_mb",
    ]
    lines = []
    for name, group in [
        *((k, [r for (kk, _), r in runs.items() if kk == k]) for k in kernels),
        ("all", list(runs.values())),
    ]:
        if not group:
            continue
        failed = sum("failed" in r for r in group)
        lines.append(
            f"{name}: {sum(r['passes'] for r in group)} of {len(group)} runs pass"
            + (f" ({failed} failed before a result)" if failed else "")
        )
        for key in keys:  # figures of the runs that reached a result
            values = [r[key] for r in group if r.get(key) is not None and "failed" not in r]
            if not values:
                continue
            mean, half = interval(values)
            spread = f"± {half:.3f}" if half is not None else "(one run)"
            lines.append(f"  {key}: {mean:.3f} {spread} (min {min(values):.3f}, max {max(values):.3f})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="one folder per kernel setting and seed")
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("0-9"), help="e.g. 0-9 or 0,3")
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=["machine", "avx2", "default"])
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="demos at a time")
    parser.add_argument("--task", default="verify", help="ragym demo --task")
    parser.add_argument("--min-gain", type=float, default=0.3, help="reward and Ident. gain a run must reach")
    parser.add_argument(
        "--min-outcome",
        type=float,
        default=None,
        help="pass on the outcome on confirmed questions instead of the gains (default: 0.5 for --task answer)",
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="run nothing: report the finished runs under --out (those not finished are named and left out)",
    )
    parser.add_argument(
        "--write-band",
        action="store_true",
        help="record the band in ragym's rl/demo/band.json "
        "(what the demo's report compares a run with) under --task",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=[],
        help="band.json files of other machines' runs to report and record beside these",
    )
    parser.add_argument("overrides", nargs="*", help="recipe overrides for every demo")
    args = parser.parse_args(argv)
    import torch

    print(f"torch {torch.__version__}, this CPU's kernels: {torch.backends.cpu.get_cpu_capability()}")
    if args.min_outcome is None and args.task == "answer":
        args.min_outcome = 0.5  # issue #46 item 4: outcome on confirmed questions >= 0.5
    todo = [(k, s) for k in args.kernels for s in args.seeds]
    if args.collect:
        folders = {(k, s): args.out / k / f"seed_{s}" for k, s in todo}
        missing = [f"{k}/{s}" for (k, s), f in folders.items() if not finished(f)]
        print(f"not finished, left out: {', '.join(missing) or 'none'}")
        folders = {ks: f for ks, f in folders.items() if finished(f)}
    else:
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            runs_done = pool.map(lambda ks: run_one(args.out, ks[0], ks[1], args.task, args.overrides), todo)
            folders = dict(zip(todo, runs_done, strict=True))
    capability = torch.backends.cpu.get_cpu_capability()
    here = f"{machine_name()} ({len(os.sched_getaffinity(0))} cores)"
    local = {ks: row(folder, args.min_gain, args.min_outcome) for ks, folder in folders.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "band.json").write_text(
        json.dumps(
            {
                "machine": here,
                "capability": capability,
                "torch": torch.__version__,
                "task": args.task,
                "pass_rule": {"min_gain": args.min_gain, "min_outcome": args.min_outcome},
                "runs": {f"{k}/{s}": r for (k, s), r in local.items()},
            },
            indent=1,
        )
    )
    # this machine's runs read back as the others are, so one labelling and one duplicate check serve both
    runs = merged_runs([args.out / "band.json", *args.merge])
    groups = list(dict.fromkeys(group for group, _ in runs))
    print(
        "| kernels | seed | reward | Ident. | P(confirm a match) | outcome, confirmed | passes | warm starts | wall | CPU "
        "| peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (kernel, seed), r in runs.items():
        if "failed" in r:
            print(f"| {kernel} | {seed} | failed: {r['failed']} | | | | no | | | {r['cpu_s']:.0f} s | |")
            continue
        margin = (
            f"{r['p_confirm_before']:.3f} -> {r['p_confirm_after']:.3f}" if "p_confirm_after" in r else "n/a"
        )
        outcome = r.get("outcome_confirmed_after")
        print(
            f"| {kernel} | {seed} | {r['reward_before']:.3f} -> {r['reward_after']:.3f} | {r['ident_before']:.2f} -> "
            f"{r['ident_after']:.2f} | {margin} | {'n/a' if outcome is None else f'{outcome:.2f}'} | "
            f"{'yes' if r['passes'] else 'no'} | {r.get('warm_starts', 'n/a')} | {r['wall_s']:.0f} s | "
            f"{r.get('cpu_s', float('nan')):.0f} s | "
            f"{r['rss_mb']:.0f} MB |"
        )
    print("\n".join(band_lines(runs, groups)))
    if args.write_band:
        settings = "; ".join(
            f"{group}: seeds {', '.join(str(s) for g, s in runs if g == group)}" for group in groups
        )
        from ragym.rl.demo.report import pass_rule

        rule = pass_rule(args.min_gain, args.min_outcome)
        write_band(args.task, runs, f"{settings}; torch {torch.__version__}", rule)
    return 0


def write_band(
    task: str, runs: dict[tuple[str, int], dict[str, Any]], settings: str, pass_rule: str
) -> dict[str, Any]:
    """Record ``task``'s band (each report figure's mean, 95% interval and range over the ``runs`` that reached a
    result and have it) and what a run had to do to pass, in the file the demo's report reads
    (``ragym.rl.demo.report.BAND``); returns it."""
    from ragym.rl.ablate.stats import mean_interval
    from ragym.rl.demo.report import BAND, BAND_FIGURES

    figures = {}
    for key in BAND_FIGURES:
        values = [r[key] for r in runs.values() if "failed" not in r and r.get(key) is not None]
        if not values:
            continue
        stats = mean_interval(values)
        figures[key] = {
            "mean": stats["mean"],
            "low": stats["low"],
            "high": stats["high"],
            "min": min(values),
            "max": max(values),
        }
    band = {
        "runs": len(runs),
        "passed": sum(r["passes"] for r in runs.values()),
        "pass_rule": pass_rule,
        "settings": settings,
        "figures": figures,
    }
    bands = json.loads(BAND.read_text()) if BAND.is_file() else {}
    BAND.write_text(json.dumps({**bands, task: band}, indent=1) + "\n")
    return band


if __name__ == "__main__":
    raise SystemExit(main())
