"""The grid machinery of ``ragym ablate``: results.json shape, per-seed aggregation, directions that seeds
disagree on, claims, resume, and the report; with a fake runner (the real runners are tested elsewhere)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from ragym.rl.ablate.cli import main, run_grid
from ragym.rl.ablate.grids import GRIDS, KBVQA_METRICS, Claim, Grid, Variant, register_grid
from ragym.rl.ablate.report import RULE
from ragym.rl.ablate.stats import TOO_FEW, direction, interval_direction, interval_text, mean_interval
from ragym.rl.errors import UsageError

GRID = Grid(
    "fake",
    "kbvqa",
    (Variant("base"), Variant("better"), Variant("lucky"), Variant("worse")),
    ("score", "cost"),
    (
        Claim("score", "better", ">", "base", "test"),
        Claim("score", "lucky", ">", "base", "test"),
        Claim("score", "worse", ">", "base", "test"),
        Claim("cost", "better", ">", "base", "test"),
    ),
    "a fake table",
)
BASE = [0.5, 0.4, 0.6, 0.5, 0.5]
SCORE_DIFFS = {
    "base": [0.0] * 5,
    "better": [0.2, 0.2, 0.3, 0.2, 0.1],  # above base on every seed, and its interval excludes zero
    "lucky": [0.01, 0.01, 0.4, 0.01, 0.01],  # above base on every seed, yet its interval holds zero
    "worse": [-0.1, -0.2, -0.1, -0.1, -0.2],  # below base on every seed: the claim is reversed
}
# variant -> seed -> metrics; cost is the same everywhere (a tie).
VALUES = {
    name: {s: {"score": BASE[s] + d[s], "cost": 1.0} for s in range(5)} for name, d in SCORE_DIFFS.items()
}
SEEDS = [0, 1, 2, 3, 4]


class FakeRunner:
    """Returns VALUES and records every call; ``fail_at`` raises on that (variant, seed), like a killed run."""

    def __init__(self, fail_at: tuple[str, int] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail_at = fail_at

    def __call__(self, out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
        if (variant.name, seed) == self.fail_at:
            raise KeyboardInterrupt
        self.calls.append((variant.name, seed))
        return {"metrics": VALUES[variant.name][seed], "wall_time_s": 2.0}


def test_the_interval_is_the_student_t_one_computed_by_hand() -> None:
    # 0.7, 0.5, 0.9: mean 0.7, sample std 0.2, t(0.975, df 2) = 4.302653: half-width 4.302653 * 0.2 / sqrt(3).
    stats = mean_interval([0.7, 0.5, 0.9])
    assert (stats["mean"], stats["std"], stats["n"]) == (pytest.approx(0.7), pytest.approx(0.2), 3)
    assert stats["half_width"] == pytest.approx(0.496828, abs=1e-6)
    assert (stats["low"], stats["high"]) == (
        pytest.approx(0.203172, abs=1e-6),
        pytest.approx(1.196828, abs=1e-6),
    )
    # Five seeds 1..5: mean 3, std sqrt(2.5) = 1.581139, t(0.975, 4) = 2.776445: half-width 1.963243.
    assert mean_interval([1.0, 2.0, 3.0, 4.0, 5.0])["half_width"] == pytest.approx(1.963243, abs=1e-6)
    one = mean_interval([0.4])
    assert (one["mean"], one["half_width"], one["low"], one["high"]) == (0.4, None, None, None)
    assert interval_text(one) == "0.400 (1 seed: no interval)"


def test_results_json_has_the_issue_shape_and_per_seed_statistics(tmp_path: Path) -> None:
    run_grid(GRID, tmp_path, SEEDS, None, [], runner=FakeRunner())
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["grid"] == "fake" and set(results["variants"]) == {"base", "better", "lucky", "worse"}
    better = results["variants"]["better"]["score"]
    assert better["per_seed"] == pytest.approx([0.7, 0.6, 0.9, 0.7, 0.6])
    assert better["mean"] == pytest.approx(0.7) and better["n"] == 5 and better["level"] == 0.95
    # Sample std sqrt(0.06 / 4) = 0.122474; half-width t(0.975, 4) 2.776445 * 0.122474 / sqrt(5) = 0.152072.
    assert better["std"] == pytest.approx(0.122474, abs=1e-6)
    assert (better["low"], better["high"]) == (
        pytest.approx(0.547928, abs=1e-6),
        pytest.approx(0.852072, abs=1e-6),
    )
    # The paired difference from the baseline: 0.2, 0.2, 0.3, 0.2, 0.1 (std 0.070711, half-width 0.087799).
    paired = better["vs_base_difference"]
    assert paired["mean"] == pytest.approx(0.2) and paired["half_width"] == pytest.approx(0.087799, abs=1e-6)
    base_cost = results["variants"]["base"]["cost"]
    assert set(base_cost) == {"mean", "std", "n", "level", "half_width", "low", "high", "per_seed"}  # no vs_
    assert results["wall_time_s"]["base"] == 10.0


def test_directions_and_claims_are_called_only_where_the_interval_excludes_zero(tmp_path: Path) -> None:
    results = run_grid(GRID, tmp_path, SEEDS, None, [], runner=FakeRunner())
    variants = results["variants"]
    assert variants["better"]["score"]["vs_base"] == "up" and variants["worse"]["score"]["vs_base"] == "down"
    # lucky is above base on every seed (and on average), yet one seed carries it: its interval holds zero.
    assert variants["lucky"]["score"]["mean"] > variants["base"]["score"]["mean"]
    assert variants["lucky"]["score"]["vs_base"] == "tie" and variants["better"]["cost"]["vs_base"] == "tie"
    claims = {c["claim"]: c for c in results["claims"]}
    verdicts = {name: (c["verdict"], c["held_per_seed"]) for name, c in claims.items()}
    assert verdicts["score: better > base"] == ("reproduced", [True] * 5)
    assert verdicts["score: lucky > base"] == (
        "tie",
        [True] * 5,
    )  # every seed agrees, the interval holds zero
    assert verdicts["score: worse > base"] == ("reversed", [False] * 5)
    assert verdicts["cost: better > base"] == ("tie", [False] * 5)
    lucky = claims["score: lucky > base"]["difference"]
    # 0.01 x 4 and 0.4: mean 0.088, std 0.174413, half-width 2.776445 * 0.174413 / sqrt(5) = 0.216563.
    assert (lucky["low"], lucky["high"]) == (
        pytest.approx(-0.128563, abs=1e-6),
        pytest.approx(0.304563, abs=1e-6),
    )
    report = (tmp_path / "report.md").read_text()
    assert (
        "| better | ragym's addition (not in the table) | 0.700 [0.548, 0.852] (up) | 1.000 [1.000, 1.000] |"
        in report
    )
    assert (
        "| score: lucky > base | test | +0.010 / +0.010 / +0.400 / +0.010 / +0.010 | +0.088 [-0.129, +0.305] | tie |"
        in report
    )
    assert "| score: worse > base | test |" in report and "| -0.140 [-0.208, -0.072] | reversed |" in report
    assert RULE in report and "`reproduced` when that interval lies wholly on the claimed side" in RULE
    assert (tmp_path / "ablation.png").stat().st_size > 0


def test_one_seed_gives_no_interval_and_too_few_seeds(tmp_path: Path) -> None:
    results = run_grid(GRID, tmp_path, [2], None, [], runner=FakeRunner())
    assert {c["verdict"] for c in results["claims"]} == {TOO_FEW}
    assert results["variants"]["better"]["score"]["vs_base"] == TOO_FEW
    report = (tmp_path / "report.md").read_text()
    assert "| better | ragym's addition (not in the table) | 0.900 (1 seed: no interval) |" in report
    assert "| +0.300 (1 seed: no interval) | too few seeds |" in report


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([0.1, 0.3], "tie"),  # t(0.975, 1) = 12.7: two seeds rarely call a direction
        ([0.2, 0.2, 0.3, 0.2, 0.1], "up"),
        ([-0.1, -0.2, -0.1, -0.1, -0.2], "down"),
        ([0.0, 0.0, 0.0], "tie"),
        ([0.01, 0.01, 0.4, 0.01, 0.01], "tie"),
        ([0.5], TOO_FEW),
    ],
)
def test_interval_direction_needs_the_interval_to_exclude_zero(diffs: list[float], expected: str) -> None:
    assert interval_direction(diffs) == expected


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([0.1, 0.3], "up"),
        ([-0.1, -2.0], "down"),
        ([0.0], "same"),
        ([0.1, 0.0], "seeds disagree"),
        ([-0.1, 0.1, 0.2], "seeds disagree"),
    ],
)
def test_ordinal_direction_needs_every_seed_to_agree(diffs: list[float], expected: str) -> None:
    """For steps to a target (no mean: 'not reached' is no number)."""
    assert direction(diffs) == expected


def test_a_killed_grid_resumes_and_skips_finished_runs(tmp_path: Path) -> None:
    first = FakeRunner(fail_at=("lucky", 1))
    with pytest.raises(KeyboardInterrupt):
        run_grid(GRID, tmp_path, [0, 1], 5, ["a=1"], runner=first)
    assert first.calls == [("base", 0), ("better", 0), ("lucky", 0), ("worse", 0), ("base", 1), ("better", 1)]
    second = FakeRunner()
    results = run_grid(GRID, tmp_path, [0, 1], 5, ["a=1"], runner=second)
    assert second.calls == [("lucky", 1), ("worse", 1)]
    assert results["variants"]["lucky"]["score"]["per_seed"] == pytest.approx([0.51, 0.41])
    with pytest.raises(UsageError, match="steps"):  # other settings in the same folder are refused
        run_grid(GRID, tmp_path, [0, 1], 6, ["a=1"], runner=FakeRunner())


def test_grid_registration_refuses_duplicates_and_unknown_claims() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_grid(GRIDS["verification"])
    bad = Grid("bad", "kbvqa", (Variant("a"),), ("m",), (Claim("m", "a", ">", "zzz", "x"),))
    with pytest.raises(ValueError, match="unknown variant"):
        register_grid(bad)
    assert "bad" not in GRIDS
    # A warm start continues one of the grid's own variants that warm-starts itself, never a chain.
    for variants in (
        (Variant("a"), Variant("b", own_warm_start=True, init_from="zzz")),
        (Variant("a"), Variant("b", init_from="a")),  # b does not warm-start itself
        (
            Variant("a"),
            Variant("b", own_warm_start=True, init_from="a"),
            Variant("c", own_warm_start=True, init_from="b"),
        ),
    ):
        with pytest.raises(ValueError, match="continues .* warm start, which must be a variant of the grid"):
            register_grid(Grid("bad", "kbvqa", variants, ("m",)))
    assert "bad" not in GRIDS


def test_the_issue_grids_exist_with_their_variants_and_metrics() -> None:
    main_grids = {
        name: [v.name for v in GRIDS[name].variants] for name in ("verification", "delta", "rejmax", "k")
    }
    # Table 5's rows, then ragym's: the full model with the Reject at the limit paid (issue #37 item 1).
    assert main_grids["verification"] == ["full", "rerank_only", "neither", "full_paid_at_limit"]
    assert main_grids["delta"][:3] == ["delta=0.2", "delta=0.1", "delta=0.3"]  # Table 8's, then ragym's
    assert sorted(main_grids["delta"][3:]) == ["delta=0.0", "delta=0.5", "delta=1.0"]
    assert main_grids["rejmax"] == [f"rej_max={r}" for r in (2, 0, 1, 3)] + ["rej_max=2_paid_at_limit"]
    for grid, variant in (("verification", "full_paid_at_limit"), ("rejmax", "rej_max=2_paid_at_limit")):
        paid, base = GRIDS[grid].variants[-1], GRIDS[grid].variants[0]
        assert paid.name == variant and paid.reward == {"verification": {"pay_reject_at_limit": True}}
        assert paid.env == base.env and paid.warm_start_from == base.name and paid.row == ""
    assert main_grids["k"] == ["k=5", "k=3", "k=7", "k=1"]  # Table 6's (5 the base), then ragym's K=1
    for name in main_grids:
        assert {"ident_acc", "needless_rejections", "rejections"} <= set(GRIDS[name].metrics)
    assert not math.isnan(GRIDS["verification"].variants[0].env["visual_check_accuracy"])


def test_list_prints_each_variant_as_a_demo_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["verification", "--out", str(tmp_path), "--seeds", "2", "--list", "--steps", "3", "x.y=1"]
    assert main([*argv, "--task", "verify"]) == 0
    out = capsys.readouterr().out
    # Every variant's prompt differs in kind (rerank_only lists no Reject, neither no Rerank), so each is a
    # whole demo with its own warm start.
    assert out.count("ragym demo --out") == 3 and out.count("ragym train --recipe kbvqa_tiny_cpu") == 1
    assert "base settings (ragym's / the paper's): K 3 / 5, Rej_max 2 / 2, delta 0.2 / 0.2" in out
    rows = tmp_path / "rows" / "rerank_only" / "train.parquet"
    assert f"data.train_files={rows}" in out and "--steps 3" in out and "x.y=1" in out
    import pandas as pd

    kwargs = json.loads(pd.read_parquet(rows)["extra_info"].iloc[0]["env_kwargs"])
    assert (kwargs["max_rejections"], kwargs["allow_reject"], kwargs["visual_check_accuracy"]) == (
        0,
        False,
        0.8,
    )
    assert len(pd.read_parquet(rows)) == len(
        pd.read_parquet(tmp_path / "kb-demo_weak_top1" / "data" / "train.parquet")
    )


def test_only_seeds_and_variants_split_a_grid_that_a_last_call_aggregates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = FakeRunner()
    monkeypatch.setitem(GRIDS, "fake", GRID)
    monkeypatch.setattr("ragym.rl.ablate.cli.runner_for", lambda kind: runner)
    common = [
        "fake",
        "--out",
        str(tmp_path),
        "--seeds",
        "2",
        "--jobs",
        "1",
    ]  # one process: the runner records
    assert main([*common, "--only-seeds", "1", "--only-variants", "lucky"]) == 0
    assert runner.calls == [("lucky", 1)]
    partial = json.loads((tmp_path / "results.json").read_text())
    assert list(partial["variants"]) == ["lucky"] and partial["claims"] == []  # no claim has both its sides
    assert main(common) == 0
    assert sorted(runner.calls) == sorted(
        [(v, s) for v in ("base", "better", "lucky", "worse") for s in (0, 1)]
    )
    assert len(json.loads((tmp_path / "results.json").read_text())["claims"]) == 4
    with pytest.raises(UsageError, match="no variant 'nope'"):
        main([*common, "--only-variants", "nope"])


def parallel_run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
    """A runner for worker processes: a variant that starts from another's warm start needs that one done."""
    import os

    from ragym.rl.ablate.grids import run_dir

    if variant.warm_start_from:
        assert (run_dir(out, Variant(variant.warm_start_from), seed) / "result.json").is_file()
    (out / f"pid-{variant.name}-{seed}").write_text(str(os.getpid()))
    return {"metrics": VALUES[variant.name][seed], "wall_time_s": 1.0}


def test_jobs_run_warm_starts_first_in_worker_processes(tmp_path: Path) -> None:
    import os

    grid = Grid("par", "fake_kind", (Variant("base"), Variant("better", warm_start_from="base")), ("score",))
    results = run_grid(grid, tmp_path, [0, 1, 2], None, [], runner=parallel_run, jobs=2)
    assert results["variants"]["better"]["score"]["per_seed"] == pytest.approx([0.7, 0.6, 0.9])
    pids = {int(p.read_text()) for p in tmp_path.glob("pid-*")}
    assert (
        len(list(tmp_path.glob("pid-*"))) == 6 and os.getpid() not in pids and len(pids) <= 4
    )  # 2 workers a phase
    with pytest.raises(UsageError, match="--jobs must be >= 1"):
        main(["verification", "--out", str(tmp_path / "x"), "--jobs", "0"])


def chained_run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
    """A runner for worker processes: a warm start that continues another's, or GRPO from another's warm start,
    needs that one's run done (its warm start is written by then), and leaves its own for GRPO to start from."""
    from ragym.rl.ablate.grids import run_dir

    for source in (variant.warm_start_from, variant.init_from):
        if source:
            assert (run_dir(out, Variant(source), seed) / "result.json").is_file(), (variant.name, source)
    if variant.name == "lucky":  # starts GRPO from better's warm start, which continued base's
        assert (run_dir(out, Variant("better"), seed) / "result.json").is_file()
    return {"metrics": VALUES[variant.name][seed], "wall_time_s": 1.0}


def test_jobs_run_a_continued_warm_start_after_its_source_and_before_grpo_from_it(tmp_path: Path) -> None:
    grid = Grid(
        "chain",
        "fake_kind",
        (
            Variant("base"),
            Variant("better", own_warm_start=True, init_from="base"),
            Variant("lucky", warm_start_from="better"),
        ),
        ("score",),
    )
    results = run_grid(grid, tmp_path, [0, 1, 2], None, [], runner=chained_run, jobs=2)
    assert results["variants"]["lucky"]["score"]["per_seed"] == pytest.approx(
        [BASE[s] + SCORE_DIFFS["lucky"][s] for s in range(3)]
    )


def waiting_run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
    """``base`` seed 1 finishes only once ``better`` seed 0 (which continues base seed 0's warm start) has run, so
    it passes only where a dependent starts as soon as its own source is done; ``worse`` fails. The wait is bounded
    at 300 s, generous for a busy machine's dispatch, and ends as soon as ``better`` seed 0 has run."""
    import time

    from ragym.rl.ablate.grids import run_dir

    if variant.name == "worse":
        raise RuntimeError("worse crashed")
    if (variant.name, seed) == ("base", 1):
        marker = run_dir(out, Variant("better"), 0) / "ran"
        deadline = time.monotonic() + 300
        while not marker.is_file():
            assert time.monotonic() < deadline, "better seed 0 did not start while base seed 1 ran"
            time.sleep(0.1)
    folder = run_dir(out, variant, seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ran").write_text("")
    return {"metrics": VALUES[variant.name][seed], "wall_time_s": 1.0}


def test_jobs_start_a_run_once_its_source_is_done_and_a_crash_stops_only_what_needs_it(
    tmp_path: Path,
) -> None:
    from ragym.rl.ablate.cli import run_parallel
    from ragym.rl.ablate.grids import run_dir

    grid = Grid(
        "deps",
        "fake_kind",
        (
            Variant("base"),
            Variant("better", own_warm_start=True, init_from="base"),
            Variant("worse"),
            Variant("lucky", warm_start_from="worse"),
        ),
        ("score",),
    )
    with pytest.raises(RuntimeError, match="worse crashed"):
        run_parallel(grid, tmp_path, [0, 1], None, [], waiting_run, jobs=2)
    ran = {(v.name, s) for v in grid.variants for s in (0, 1) if (run_dir(tmp_path, v, s) / "ran").is_file()}
    # Every run but the crashed ones and GRPO from their warm starts; those wait for a resume.
    assert ran == {("base", 0), ("base", 1), ("better", 0), ("better", 1)}
    for seed in (0, 1):
        assert (run_dir(tmp_path, Variant("better"), seed) / "result.json").is_file()
        assert not run_dir(tmp_path, Variant("lucky"), seed).exists()


def test_defaults_five_seeds_on_the_answer_task_and_a_job_per_core_up_to_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called: dict[str, dict] = {}

    def record(grid: Grid, out: Path, seeds: list[int], steps, extra, jobs: int, task: str) -> dict:
        called[grid.name] = {"seeds": seeds, "jobs": jobs, "task": task, "kb": grid.kb_preset}
        return {"claims": []}

    monkeypatch.setattr("ragym.rl.ablate.cli.run_grid", record)
    monkeypatch.setattr("ragym.rl.ablate.cli.available_cores", lambda: 8)
    for name in ("verification", "demo", "docmemo", "memora_r"):
        assert main([name, "--out", str(tmp_path / name)]) == 0
    # KB-VQA grids: 5 seeds of the answer task (its KB); 4 variants x 5 seeds = 20 runs, 8 cores: 8 jobs.
    assert called["verification"] == {
        "seeds": [0, 1, 2, 3, 4],
        "jobs": 8,
        "task": "answer",
        "kb": "demo_weak_top1_slots",
    }
    assert called["demo"] == {"seeds": [0, 1, 2, 3, 4], "jobs": 5, "task": "answer", "kb": "demo_slots"}
    assert (called["docmemo"]["seeds"], called["docmemo"]["task"]) == ([0, 1, 2, 3, 4], "verify")
    assert (called["memora_r"]["seeds"], called["memora_r"]["task"]) == ([0, 1, 2], "verify")  # minutes a run
    assert (
        main(["demo", "--out", str(tmp_path / "v"), "--task", "verify", "--seeds", "10", "--jobs", "2"]) == 0
    )
    assert called["demo"] == {"seeds": list(range(10)), "jobs": 2, "task": "verify", "kb": "demo"}
    assert main(["demo", "--out", str(tmp_path / "one"), "--seeds", "1"]) == 0
    assert called["demo"]["jobs"] == 1  # never more jobs than runs
    from ragym.envs.retrieval.search_settings import available_cores

    assert 1 <= available_cores() <= len(os.sched_getaffinity(0))


DEMO_GAINS = {
    "ident_acc": [0.70, 0.75, 0.80, 0.85, 0.70, 0.75, 0.80, 0.85, 0.75, 0.75],
    "reward_mean": [0.3] * 10,
}
"""The fake demo's after - before per seed (before: 0 for every metric): ident_acc mean 0.77, reward_mean 0.3."""


def demo_run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
    before = dict.fromkeys(KBVQA_METRICS, 0.0)
    after = {**before, **{m: gains[seed] for m, gains in DEMO_GAINS.items()}}
    return {"metrics": after, "before_grpo": before, "wall_time_s": 1.0}


def test_the_demo_grid_reports_each_metric_before_and_after_and_the_gain_with_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    demo = GRIDS["demo"]
    assert [(v.name, v.env, v.reward, v.overrides) for v in demo.variants] == [("demo", {}, {}, ())]
    assert demo.claims == () and {"ident_acc", "reward_mean"} <= set(demo.metrics) and demo.steps is None
    monkeypatch.setattr("ragym.rl.ablate.cli.runner_for", lambda kind: demo_run)
    argv = ["demo", "--task", "verify", "--seeds", "10", "--jobs", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    gain = results["grpo_movement"]["variants"]["demo"]["gain"]["ident_acc"]
    # 10 seeds: mean 0.77, sample std 0.053748, t(0.975, 9) = 2.262157: half-width 0.038449.
    assert gain["mean"] == pytest.approx(0.77) and gain["n"] == 10
    assert gain["half_width"] == pytest.approx(0.038449, abs=1e-6)
    assert results["variants"]["demo"]["ident_acc"]["low"] == pytest.approx(gain["low"])  # before is 0
    assert results["before_grpo"]["demo"]["ident_acc"]["half_width"] == 0.0
    flat = results["grpo_movement"]["variants"]["demo"]["gain"]["reward_mean"]
    assert (flat["low"], flat["high"]) == (pytest.approx(0.3), pytest.approx(0.3))
    report = (tmp_path / "report.md").read_text()
    assert "| demo | +0.770 [+0.732, +0.808] |" in report  # the gain table's first cell: ident_acc
    assert "| demo | ragym's addition (not in the table) | 0.770 [0.732, 0.808] |" in report
    assert "## The paper's directions" not in report  # no claims
    out = capsys.readouterr().out
    assert (
        "demo after GRPO (gain), mean [95% interval] over seeds: ident_acc 0.770 [0.732, 0.808] (+0.770"
        in out
    )
    assert "demo (verify task): 1 variants x 10 seeds, 1 at a time" in out


def missing_run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
    """A runner whose warm start misses its target for variant ``base`` on seed 1 (a module-level function, so
    worker processes can run it)."""
    from ragym.rl.demo.tasks import WarmStartMissed

    if (variant.name, seed) == ("base", 1):
        raise WarmStartMissed("seed 1: the warm start missed its target: copy accuracy 0.400 < 0.97")
    return {"metrics": VALUES[variant.name][seed], "wall_time_s": 1.0}


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_missed_warm_start_is_recorded_and_its_seed_leaves_the_table(tmp_path: Path, jobs: int) -> None:
    grid = Grid(
        "miss",
        "fake_kind",
        (
            Variant("base"),
            Variant("better", warm_start_from="base"),
            Variant("worse"),
            Variant("lucky", own_warm_start=True, init_from="base"),
        ),
        ("score",),
        (Claim("score", "better", ">", "base", "test"),),
    )
    results = run_grid(grid, tmp_path, [0, 1, 2], None, [], runner=missing_run, jobs=jobs)
    # Seed 1 is gone from every variant (paired differences), and said why.
    assert results["seeds"] == [0, 2] and results["seeds_asked"] == [0, 1, 2]
    assert results["variants"]["worse"]["score"]["per_seed"] == pytest.approx([0.4, 0.5])
    assert results["claims"][0]["difference"]["per_seed"] == pytest.approx([0.2, 0.3])
    reasons = {f["variant"]: f["reason"] for f in results["failed_warm_starts"]}
    assert reasons["base"].endswith("copy accuracy 0.400 < 0.97")
    assert reasons["better"].startswith("starts from base's warm start, which missed its target")
    assert reasons["lucky"].startswith("continues base's warm start, which missed its target")
    report = (tmp_path / "report.md").read_text()
    assert (
        "3 warm start(s) missed their target" in report and "- base seed 1: seed 1: the warm start" in report
    )
    # A resume keeps the failures (a warm start is deterministic) and runs nothing again.
    again = run_grid(grid, tmp_path, [0, 1, 2], None, [], runner=FakeRunner(fail_at=("base", 1)), jobs=1)
    assert again["seeds"] == [0, 2]


def test_a_grid_whose_every_seed_missed_says_so(tmp_path: Path) -> None:
    grid = Grid("allmiss", "fake_kind", (Variant("base"),), ("score",))
    with pytest.raises(UsageError, match="no seed of \\[1\\] has a warm start that met its target"):
        run_grid(grid, tmp_path, [1], None, [], runner=missing_run)
