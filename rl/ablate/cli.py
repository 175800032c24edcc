"""``ragym ablate NAME --out DIR [--seeds N] [--steps S] [key=value ...]``: a paper's ablation table in miniature.

Runs every variant of the named grid over seeds 0..N-1 (default: the grid's, 5 for the KB-VQA grids), ``--jobs J``
(variant, seed) runs at a time in worker processes (default: the usable cores, warm starts first; one at a time
in this process when J is 1), each into ``DIR/runs/VARIANT/seed_S/`` ending with its ``result.json``; a re-run
skips finished runs (and the demo engine resumes an interrupted one from its checkpoint). KB-VQA grids run the
demo's ``answer`` task unless ``--task verify``. Then writes ``DIR/results.json`` (per variant and metric the
mean over seeds, its 95% interval and the per-seed values; the paired difference from the first variant; the
paper's claims judged by their difference's interval) and ``DIR/report.md`` with a plot. The ``demo`` grid is
the demo alone: N seeds of it, each metric before and after GRPO and the gain, with intervals. Grids with a target Ident. (``credit``, ``credit_delta05``) also evaluate the
held-out rows during GRPO (every ``--eval-every`` steps) and report each run's steps to the target and what
dynamic sampling dropped (``ragym.rl.ablate.speed``). ``--list`` prints each variant's command and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragym.envs.retrieval.search_settings import available_cores
from ragym.rl.ablate.grids import (
    GRIDS,
    Grid,
    Variant,
    base_settings,
    default_task,
    grid_for_task,
    row_label,
    run_dir,
)
from ragym.rl.ablate.report import write_report
from ragym.rl.ablate.speed import NOT_REACHED, Curves, speed
from ragym.rl.ablate.stats import (
    Runs,
    aggregate,
    by_step,
    claims_under_rl,
    interval_text,
    mean_interval,
    movement,
)
from ragym.rl.demo.tasks import DEFAULT_TASK, DEMO_TASKS, WarmStartMissed
from ragym.rl.errors import UsageError

logger = logging.getLogger(__name__)

Runner = Callable[[Path, Variant, int, "int | None", list[str]], dict[str, Any]]
"""(grid dir, variant, seed, steps, extra overrides) -> {"metrics": {...}, "wall_time_s": s} (KB-VQA runs also
give ``before_grpo``: the same metrics of the policy GRPO started from)."""
GRID_STATE = "grid.json"
"""What a grid folder was run with; a re-run must match it to resume."""
FAILED = "failed.json"
"""A (variant, seed) whose warm start missed ``ragym.demo.warm_start_target`` (``WarmStartMissed``): its reason.
Kept like a result (a warm start is deterministic, so a re-run would miss again; delete it to retry)."""


def runner_for(kind: str) -> Runner:
    """The run function of a grid kind (imported lazily: the KB-VQA runner loads torch and verl)."""
    if kind == "kbvqa":
        from ragym.rl.ablate.kbvqa import run_kbvqa

        return run_kbvqa
    if kind == "docmemo":
        from ragym.rl.ablate.docmemo import run_docmemo

        return run_docmemo
    if kind == "memora_r":
        from ragym.rl.ablate.memora_r import run_memora_r

        return run_memora_r
    raise ValueError(f"no runner for grid kind {kind!r}")


def check_grid_folder(
    out: Path, grid: Grid, steps: int | None, extra: list[str], task: str = DEFAULT_TASK
) -> None:
    """Record the grid's settings in a new folder; refuse to resume one run with other settings."""
    state = {"grid": grid.name, "steps": steps, "overrides": extra, "task": task}
    path = out / GRID_STATE
    if path.is_file():
        before = {"task": DEFAULT_TASK, **json.loads(path.read_text())}  # folders from before tasks: verify
        if before != state:
            raise UsageError(
                f"{out} holds a grid run with {before}, not {state}; rerun with those or a new --out"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=1))


def _save(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))


def _finished(out: Path, variant: Variant, seed: int) -> bool:
    """Whether (variant, seed) has its result or its recorded failed warm start."""
    folder = run_dir(out, variant, seed)
    return (folder / "result.json").is_file() or (folder / FAILED).is_file()


def _record_miss(out: Path, variant: Variant, seed: int, reason: str) -> None:
    """Keep a failed warm start's reason in place of a result, and say so."""
    logger.warning("%s seed %d: not run: %s", variant.name, seed, reason)
    _save(run_dir(out, variant, seed) / FAILED, {"variant": variant.name, "seed": seed, "reason": reason})


def _source_missed(out: Path, variant: Variant, seed: int) -> str | None:
    """Why ``variant`` cannot run ``seed`` because the variant whose warm start it starts from (GRPO from it, or
    its own warm start continuing it) missed its target."""
    source = _source(variant)
    if not source:
        return None
    failed = run_dir(out, Variant(source), seed) / FAILED
    if not failed.is_file():
        return None
    how = "starts from" if variant.warm_start_from else "continues"
    return (
        f"{how} {source}'s warm start, which missed its target: " + json.loads(failed.read_text())["reason"]
    )


def _run_one(
    run: Runner, out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]
) -> None:
    """One (variant, seed) in this process: its result.json, or its failed.json where its warm start missed."""
    reason = _source_missed(out, variant, seed)
    if reason is not None:
        _record_miss(out, variant, seed, reason)
        return
    try:
        result = run(out, variant, seed, steps, extra)
    except WarmStartMissed as missed:
        _record_miss(out, variant, seed, str(missed))
        return
    _save(run_dir(out, variant, seed) / "result.json", result)


def _source(variant: Variant) -> str:
    """The variant whose warm start ``variant`` needs (GRPO from it, or its own warm start continuing it); empty:
    none (``init_from`` sources are never themselves continuations: ``register_grid``)."""
    return variant.warm_start_from or variant.init_from


def run_parallel(
    grid: Grid, out: Path, seeds: list[int], steps: int | None, extra: list[str], run: Runner, jobs: int
) -> None:
    """Every unfinished (variant, seed) in ``jobs`` worker processes, each started as soon as a worker is free and
    the run whose warm start it needs (``_source``) is done, warm starts others wait on first. A run that fails
    does not stop the others: the ones that need it are left for a resume, and its error is raised at the end."""
    if grid.kind == "kbvqa":  # built once here, not raced for by the workers
        from ragym.rl.ablate.kbvqa import shared_kb, write_rows

        shared_kb(out, grid.kb_preset)
        for variant in grid.variants:
            write_rows(out, variant)
    # Sources first (a stable sort keeps seed-major order within each kind), then what needs them.
    todo = sorted(
        [(v, s) for s in seeds for v in grid.variants if not _finished(out, v, s)],
        key=lambda run_: bool(_source(run_[0])),
    )
    if not todo:
        return
    running: dict[Future[None], tuple[Variant, int]] = {}
    errors: list[BaseException] = []
    blocked: set[tuple[str, int]] = set()

    def waits(variant: Variant, seed: int) -> bool:
        """Whether the run ``variant`` needs is still to be done in this call (else it is done, or not ours)."""
        pending = [(v.name, s) for v, s in [*todo, *running.values()]]
        return bool(_source(variant)) and (_source(variant), seed) in pending

    context = multiprocessing.get_context("spawn")  # torch and faiss threads do not survive fork
    with ProcessPoolExecutor(min(jobs, len(todo)), mp_context=context) as pool:
        while True:
            for variant, seed in list(todo):
                if len(running) >= jobs:
                    break
                if waits(variant, seed):
                    continue
                todo.remove((variant, seed))
                if _source_missed(out, variant, seed) is not None:
                    _run_one(run, out, variant, seed, steps, extra)  # records the miss, runs nothing
                    continue
                future = pool.submit(_run_one, run, out, variant, seed, steps, extra)
                running[future] = (variant, seed)
            if not running:
                break  # what is left waits on a run that failed
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                variant, seed = running.pop(future)
                error = future.exception()
                if error is None:
                    logger.info("%s seed %d: finished", variant.name, seed)
                    continue
                logger.error("%s seed %d: failed: %s", variant.name, seed, error)
                errors.append(error)
                blocked.add((variant.name, seed))
            # What needs a failed run (or a run that needs one) cannot run in this call.
            while blocking := [(v, s) for v, s in todo if (_source(v), s) in blocked]:
                blocked.update((v.name, s) for v, s in blocking)
                todo = [run_ for run_ in todo if run_ not in blocking]
    if errors:
        raise errors[0]


def run_grid(
    grid: Grid,
    out: Path,
    seeds: list[int],
    steps: int | None,
    extra: list[str],
    runner: Runner | None = None,
    jobs: int = 1,
    task: str = DEFAULT_TASK,
) -> dict[str, Any]:
    """Every (variant, seed) not finished yet, then results.json and report.md; returns the results. ``grid`` is
    already on ``task`` (``grid_for_task``); the folder records the task, so a resume cannot mix two."""
    check_grid_folder(out, grid, steps, extra, task)
    run = runner or runner_for(grid.kind)
    runs: Runs = {v.name: {} for v in grid.variants}
    walls: dict[str, list[float]] = {v.name: [] for v in grid.variants}
    befores: Runs = {v.name: {} for v in grid.variants}
    curves: Curves = {v.name: {} for v in grid.variants}
    sampling: dict[str, dict[int, dict]] = {v.name: {} for v in grid.variants}
    retriever: Curves = {v.name: {} for v in grid.variants}
    if jobs > 1:
        run_parallel(grid, out, seeds, steps, extra, run, jobs)
    for seed in seeds:  # seed-major: a killed grid has every variant at the same number of seeds
        for variant in grid.variants:
            if _finished(out, variant, seed):
                logger.info("%s seed %d: finished before, skipped", variant.name, seed)
            else:
                _run_one(run, out, variant, seed, steps, extra)
    failed = failed_warm_starts(out, grid, seeds)
    asked, seeds = seeds, [s for s in seeds if s not in {f["seed"] for f in failed}]
    if not seeds:
        raise UsageError(
            f"{out}: no seed of {asked} has a warm start that met its target in every variant "
            f"(each run's failed.json says what it missed); no table to write"
        )
    for seed in seeds:
        for variant in grid.variants:
            path = run_dir(out, variant, seed) / "result.json"
            result = json.loads(path.read_text())
            runs[variant.name][seed] = result["metrics"]
            walls[variant.name].append(result["wall_time_s"])
            if "before_grpo" in result:
                befores[variant.name][seed] = result["before_grpo"]
            if "retriever_curve" in result:  # a run that served a versioned retriever (ragym.cotrain)
                retriever[variant.name][seed] = result["retriever_curve"]
                # before GRPO it served its initial version: the curve's first point, logged before any swap
                first = {f"retriever_{k}": v for k, v in result["retriever_curve"][0].items() if k != "step"}
                befores[variant.name][seed] = {**befores[variant.name].get(seed, {}), **first}
            if grid.target is not None:
                if "held_out_curve" not in result:
                    raise RuntimeError(
                        f"{path} has no held-out curve (trainer.test_freq was off): rerun that "
                        f"run in a new --out"
                    )
                curves[variant.name][seed] = result["held_out_curve"]
                sampling[variant.name][seed] = result["train_sampling"]
    results = aggregate(grid, runs, seeds)
    results["task"] = task
    results["seeds_asked"], results["failed_warm_starts"] = asked, failed
    if grid.kind == "kbvqa":
        results["base_settings"] = {
            name: {"ragym": ours, "paper": paper} for name, (ours, paper) in base_settings(grid).items()
        }
    results["wall_time_s"] = {name: sum(w) for name, w in walls.items()}
    if all(len(b) == len(seeds) for b in befores.values()):  # runners that train report where they started
        results["before_grpo"] = {
            name: {m: mean_interval([b[s][m] for s in seeds]) for m in grid.metrics}
            for name, b in befores.items()
        }
        results["grpo_movement"] = movement(grid, runs, befores, seeds)
        claims_under_rl(results["claims"], results["grpo_movement"]["variants"], seeds)
    if grid.target is not None:
        results.update(speed(grid, curves, sampling, seeds))
    if all(len(c) == len(seeds) for c in retriever.values()):
        results["retriever_by_step"] = by_step(retriever, seeds, grid.variants[0].name)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    write_report(out, grid, results)
    return results


def failed_warm_starts(out: Path, grid: Grid, seeds: list[int]) -> list[dict[str, Any]]:
    """Every (variant, seed) of ``seeds`` whose warm start missed its target (``FAILED``), with its reason. Such a
    seed leaves the grid's table for every variant: a failed warm start is a bug to fix, not a row to average,
    and the per-seed differences stay paired."""
    failed = []
    for seed in seeds:
        for variant in grid.variants:
            path = run_dir(out, variant, seed) / FAILED
            if path.is_file():
                failed.append(json.loads(path.read_text()))
    return failed


def list_commands(grid: Grid, out: Path, seeds: list[int], steps: int | None, extra: list[str]) -> list[str]:
    """One line per variant: its settings and, for KB-VQA grids, the command that runs its first seed alone."""
    lines = [f"grid {grid.name}: {grid.paper}"]
    if grid.kind == "kbvqa":
        lines.append(
            "base settings (ragym's / the paper's): "
            + ", ".join(f"{name} {ours} / {paper}" for name, (ours, paper) in base_settings(grid).items())
        )
    if grid.target is not None:
        lines.append(
            f"steps_to_target: the first held-out evaluation (every {grid.eval_every} GRPO steps and the "
            f"last) with ident_acc >= {grid.target.ident_acc}: {grid.target.source}"
        )
    for variant in grid.variants:
        lines.append(
            f"- {variant.name} [{row_label(variant)}]: env {variant.env}, reward {variant.reward}, "
            f"options {variant.options}, overrides {list(variant.overrides)}"
        )
        if grid.kind == "kbvqa":
            from ragym.rl.ablate.kbvqa import command

            lines.append("    " + command(out, variant, seeds[0], steps, extra))
    return lines


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line of ``ragym ablate``; seeds, task and jobs left None take the grid's defaults."""
    parser = argparse.ArgumentParser(prog="ragym ablate", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "name", choices=sorted(GRIDS), help="the grid to run (demo: the demo alone, over seeds)"
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder (re-running resumes in it)")
    parser.add_argument(
        "--seeds",
        type=int,
        help="seeds 0..N-1 per variant (default: the grid's; 5 for the "
        "KB-VQA and docmemo grids, 3 for memora_r)",
    )
    parser.add_argument(
        "--steps", type=int, help="GRPO steps (KB-VQA; default 80) or rounds budget; default: the grid's"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        help="(variant, seed) runs at a time, in worker processes (default: "
        f"the usable cores, {available_cores()} here, at most the number of runs; each KB-VQA run "
        "uses one torch thread unless $OMP_NUM_THREADS says otherwise, so J runs fill J cores)",
    )
    parser.add_argument("--list", action="store_true", help="print every variant's settings and command only")
    parser.add_argument(
        "--only-seeds",
        help="comma-separated seeds to run now (split a grid across processes; "
        "a later call with --seeds N aggregates all)",
    )
    parser.add_argument(
        "--only-variants",
        help="comma-separated variants to run now (results.json and the "
        "claims then cover only these; a later call without it aggregates all)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        help="held-out greedy evaluation every N GRPO steps during "
        "training, the curve of steps_to_target (grids with a target: credit, credit_delta05; "
        "default: the grid's, 5)",
    )
    parser.add_argument(
        "--task",
        choices=list(DEMO_TASKS),
        help="KB-VQA grids: the demo task every variant runs "
        "(default answer: the policy also learns to answer, ragym.rl.demo.tasks; verify: the demo "
        "as make demo runs it)",
    )
    parser.add_argument("overrides", nargs="*", help="recipe overrides applied to every variant")
    return parser.parse_intermixed_args(argv)


def settings(args: argparse.Namespace) -> tuple[Grid, list[int], str, int]:
    """The grid on its task, the seeds, the task and the jobs the command line asks for (defaults filled in);
    edits ``args.overrides`` and ``args.out`` in place (``--eval-every``, the absolute folder)."""
    grid = GRIDS[args.name]
    task = args.task or default_task(grid)
    grid, args.out = grid_for_task(grid, task), args.out.resolve()
    seeds = list(range(grid.seeds if args.seeds is None else args.seeds))
    jobs = available_cores() if args.jobs is None else args.jobs
    if not seeds or jobs < 1:
        raise UsageError(f"--seeds and --jobs must be >= 1, got --seeds {args.seeds} --jobs {args.jobs}")
    if args.only_seeds:
        seeds = [int(s) for s in args.only_seeds.split(",")]
    if args.only_variants:
        names = args.only_variants.split(",")
        unknown = set(names) - {v.name for v in grid.variants}
        if unknown:
            raise UsageError(f"grid {grid.name} has no variant {sorted(unknown)[0]!r}")
        claims = tuple(c for c in grid.claims if {c.left, c.right} <= set(names))
        grid = replace(grid, variants=tuple(v for v in grid.variants if v.name in names), claims=claims)
    if args.eval_every is not None:
        if grid.target is None:
            raise UsageError(f"--eval-every: grid {grid.name} keeps no held-out curve (no steps_to_target)")
        if args.eval_every < 1:
            raise UsageError(f"--eval-every must be >= 1, got {args.eval_every}")
        # After the variant's own test_freq, so it wins; recorded with the folder's overrides (resume checks it).
        args.overrides = [*args.overrides, f"trainer.test_freq={args.eval_every}"]
        grid = replace(grid, eval_every=args.eval_every)
    return grid, seeds, task, min(jobs, len(grid.variants) * len(seeds))


def main(argv: list[str]) -> int:
    """``ragym ablate NAME --out DIR [--seeds N] [--steps S] [--jobs J] [--task T] [--list] [key=value ...]``."""
    _register_optional_grids()
    args = parse_args(argv)
    grid, seeds, task, jobs = settings(args)
    steps = args.steps if args.steps is not None else grid.steps
    if args.list:
        print("\n".join(list_commands(grid, args.out, seeds, steps, args.overrides)))
        return 0
    start = time.perf_counter()
    results = run_grid(grid, args.out, seeds, steps, args.overrides, jobs=jobs, task=task)
    print("\n".join(summary_lines(results)))
    print(
        f"{grid.name} ({task} task): {len(grid.variants)} variants x {len(seeds)} seeds, {jobs} at a time, in "
        f"{time.perf_counter() - start:.0f}s (this call); report: {args.out / 'report.md'}"
    )
    return 0


def summary_lines(results: dict[str, Any]) -> list[str]:
    """What the command prints of its results: claims and their verdicts, the gains GRPO made (mean and 95%
    interval over seeds), what it moved, and the steps to the target."""
    lines = []
    for claim in results["claims"]:
        under_rl = f"; on seeds GRPO moved: {claim['rl_verdict']}" if "rl_verdict" in claim else ""
        lines.append(
            f"{claim['claim']} ({claim['source']}): {claim['verdict']}, difference "
            f"{interval_text(claim['difference'], signed=True)}{under_rl}"
        )
    if "grpo_movement" in results:
        moved = results["grpo_movement"]
        for name, info in moved["variants"].items():
            after = results["variants"][name]
            lines.append(
                f"{name} after GRPO (gain), mean [95% interval] over seeds: "
                + ", ".join(
                    f"{m} {interval_text(after[m])} ({interval_text(g, signed=True)})"
                    for m, g in info["gain"].items()
                )
            )
        lines.append(
            "GRPO moved the greedy policy: "
            + ", ".join(f"{n} on {v['moved']}" for n, v in moved["variants"].items())
            + f" -> {moved['verdict']}"
        )
    if "steps_to_target" in results:
        reach = results["steps_to_target"]
        lines.append(
            f"steps to held-out ident_acc >= {reach['target_ident_acc']} per seed: "
            + ", ".join(
                f"{name} " + "/".join(NOT_REACHED if s is None else str(s) for s in v["per_seed"])
                for name, v in reach["variants"].items()
            )
        )
    return lines


def _register_optional_grids() -> None:
    """Grids whose modules define them (imported here so ``--help`` lists them)."""
    import importlib

    for module in ("ragym.rl.ablate.docmemo", "ragym.rl.ablate.memora_r"):
        importlib.import_module(module)
