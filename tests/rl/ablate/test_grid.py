"""The grid machinery of ``ragym ablate``: results.json shape, per-seed aggregation, directions that seeds
disagree on, claims, resume, and the report; with a fake runner (the real runners are tested elsewhere)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragym.rl.ablate.cli import main, run_grid
from ragym.rl.ablate.grids import GRIDS, Claim, Grid, Variant, register_grid
from ragym.rl.ablate.stats import direction
from ragym.rl.errors import UsageError

GRID = Grid(
    "fake",
    "kbvqa",
    (Variant("base"), Variant("better"), Variant("mixed")),
    ("score", "cost"),
    (
        Claim("score", "better", ">", "base", "test"),
        Claim("score", "mixed", ">", "base", "test"),
        Claim("cost", "better", ">", "base", "test"),
    ),  # fmt: skip
    "a fake table",
)
# variant -> seed -> metrics: 'better' beats 'base' on every seed; 'mixed' on seed 0 only; cost ties.
VALUES = {
    "base": {0: {"score": 0.5, "cost": 1.0}, 1: {"score": 0.4, "cost": 1.0}, 2: {"score": 0.6, "cost": 1.0}},
    "better": {
        0: {"score": 0.7, "cost": 1.0},
        1: {"score": 0.5, "cost": 1.0},
        2: {"score": 0.9, "cost": 1.0},
    },
    "mixed": {0: {"score": 0.9, "cost": 2.0}, 1: {"score": 0.1, "cost": 2.0}, 2: {"score": 0.6, "cost": 2.0}},
}


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


def test_results_json_has_the_issue_shape_and_per_seed_statistics(tmp_path: Path) -> None:
    run_grid(GRID, tmp_path, [0, 1, 2], None, [], runner=FakeRunner())
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["grid"] == "fake" and set(results["variants"]) == {"base", "better", "mixed"}
    better = results["variants"]["better"]["score"]
    assert better["per_seed"] == [0.7, 0.5, 0.9]
    assert better["mean"] == pytest.approx(0.7)
    assert better["std"] == pytest.approx(0.2)  # sample std of 0.7, 0.5, 0.9 (hand-computed)
    assert set(results["variants"]["base"]["cost"]) == {"mean", "std", "per_seed"}  # the baseline has no vs_
    assert results["wall_time_s"]["base"] == 6.0


def test_a_variant_whose_seeds_disagree_is_flagged_not_averaged(tmp_path: Path) -> None:
    results = run_grid(GRID, tmp_path, [0, 1, 2], None, [], runner=FakeRunner())
    variants = results["variants"]
    assert variants["better"]["score"]["vs_base"] == "up"
    # mixed: +0.4, -0.3, 0.0 against base; its mean (0.533) is above base's (0.5), yet no direction is claimed.
    assert variants["mixed"]["score"]["mean"] > variants["base"]["score"]["mean"]
    assert variants["mixed"]["score"]["vs_base"] == "seeds disagree"
    assert variants["mixed"]["cost"]["vs_base"] == "up" and variants["better"]["cost"]["vs_base"] == "same"
    verdicts = {c["claim"]: (c["verdict"], c["held_per_seed"]) for c in results["claims"]}
    assert verdicts["score: better > base"] == ("reproduced", [True, True, True])
    assert verdicts["score: mixed > base"] == ("seeds disagree", [True, False, False])
    assert verdicts["cost: better > base"] == ("not reproduced", [False, False, False])
    report = (tmp_path / "report.md").read_text()
    assert (
        "(seeds disagree)" in report
        and "| score: mixed > base | test | yes no no | seeds disagree |" in report
    )
    assert (tmp_path / "ablation.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([0.1, 0.3], "up"),
        ([-0.1, -2.0], "down"),
        ([0.0], "same"),
        ([0.1, 0.0], "seeds disagree"),
        ([-0.1, 0.1, 0.2], "seeds disagree"),
    ],  # fmt: skip
)
def test_direction_needs_every_seed_to_agree(diffs: list[float], expected: str) -> None:
    assert direction(diffs) == expected


def test_a_killed_grid_resumes_and_skips_finished_runs(tmp_path: Path) -> None:
    first = FakeRunner(fail_at=("mixed", 1))
    with pytest.raises(KeyboardInterrupt):
        run_grid(GRID, tmp_path, [0, 1, 2], 5, ["a=1"], runner=first)
    assert first.calls == [("base", 0), ("better", 0), ("mixed", 0), ("base", 1), ("better", 1)]
    second = FakeRunner()
    results = run_grid(GRID, tmp_path, [0, 1, 2], 5, ["a=1"], runner=second)
    assert second.calls == [("mixed", 1), ("base", 2), ("better", 2), ("mixed", 2)]
    assert results["variants"]["mixed"]["score"]["per_seed"] == [0.9, 0.1, 0.6]
    with pytest.raises(UsageError, match="steps"):  # other settings in the same folder are refused
        run_grid(GRID, tmp_path, [0, 1, 2], 6, ["a=1"], runner=FakeRunner())


def test_grid_registration_refuses_duplicates_and_unknown_claims() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_grid(GRIDS["verification"])
    bad = Grid("bad", "kbvqa", (Variant("a"),), ("m",), (Claim("m", "a", ">", "zzz", "x"),))
    with pytest.raises(ValueError, match="unknown variant"):
        register_grid(bad)
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
    assert (
        main(["verification", "--out", str(tmp_path), "--seeds", "2", "--list", "--steps", "3", "x.y=1"]) == 0
    )
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
    assert (
        main(
            ["fake", "--out", str(tmp_path), "--seeds", "2", "--only-seeds", "1", "--only-variants", "mixed"]
        )
        == 0
    )
    assert runner.calls == [("mixed", 1)]
    partial = json.loads((tmp_path / "results.json").read_text())
    assert list(partial["variants"]) == ["mixed"] and partial["claims"] == []  # no claim has both its sides
    assert main(["fake", "--out", str(tmp_path), "--seeds", "2"]) == 0
    assert sorted(runner.calls) == sorted([("mixed", 1), ("base", 0), ("better", 0), ("mixed", 0), ("base", 1),
                                           ("better", 1)])  # fmt: skip
    assert len(json.loads((tmp_path / "results.json").read_text())["claims"]) == 3
    with pytest.raises(UsageError, match="no variant 'nope'"):
        main(["fake", "--out", str(tmp_path), "--seeds", "2", "--only-variants", "nope"])


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
    assert results["variants"]["better"]["score"]["per_seed"] == [0.7, 0.5, 0.9]
    pids = {int(p.read_text()) for p in tmp_path.glob("pid-*")}
    assert (
        len(list(tmp_path.glob("pid-*"))) == 6 and os.getpid() not in pids and len(pids) <= 4
    )  # 2 workers a phase
    with pytest.raises(UsageError, match="--jobs must be >= 1"):
        main(["verification", "--out", str(tmp_path / "x"), "--jobs", "0"])
