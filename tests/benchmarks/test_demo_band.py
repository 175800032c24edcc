"""``benchmarks/demo_band.py``: other machines' runs merge into the band under their own kernels' label."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.demo_band import band_lines, kernel_label, merged_runs

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _band(path: Path, machine: str, capability: str, runs: dict[str, float]) -> Path:
    figures = {"reward_after": 2.0, "ident_gain": 0.79, "passes": True}
    body = {
        "machine": machine,
        "capability": capability,
        "runs": {k: {**figures, "reward_gain": v} for k, v in runs.items()},
    }
    path.write_text(json.dumps(body))
    return path


def test_merged_runs_are_labelled_by_the_kernels_they_ran_with(tmp_path: Path) -> None:
    amd = _band(
        tmp_path / "amd.json", "AMD EPYC", "AVX2", {"machine/0": 0.7, "default/0": 0.6, "machine/1": 0.1}
    )
    intel = _band(tmp_path / "intel.json", "Xeon", "AVX512", {"machine/0": 0.8})
    runs = merged_runs([amd, intel])
    assert set(runs) == {
        ("AMD EPYC: avx2", 0),
        ("AMD EPYC: default", 0),
        ("AMD EPYC: avx2", 1),
        ("Xeon: avx512", 0),
    }
    assert runs[("AMD EPYC: avx2", 1)]["reward_gain"] == 0.1
    lines = band_lines(runs, ["AMD EPYC: avx2", "Xeon: avx512"])
    assert lines[0] == "AMD EPYC: avx2: 2 of 2 runs pass" and "Xeon: avx512: 1 of 1 runs pass" in lines
    assert "all: 4 of 4 runs pass" in lines
    assert kernel_label("machine", "AVX512") == "avx512" and kernel_label("default", "AVX512") == "default"


def test_a_file_that_is_not_a_band_or_a_run_merged_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no such band.json"):
        merged_runs([tmp_path / "missing.json"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"machine/0": {}}))  # the old format: runs only, no machine
    with pytest.raises(SystemExit, match="not a band.json"):
        merged_runs([bad])
    one = _band(tmp_path / "one.json", "AMD EPYC", "AVX2", {"machine/0": 0.7})
    two = _band(tmp_path / "two.json", "AMD EPYC", "AVX2", {"avx2/0": 0.7})  # the same kernels, forced
    with pytest.raises(SystemExit, match="avx2 seed 0 is in another merged file"):
        merged_runs([one, two])


def test_the_kept_bands_of_other_machines_read_back() -> None:
    """Each kept file's pass flags follow its task's rule: the verify task's gains (files without a task are its),
    the answer task's outcome on confirmed questions; a failed run passes under neither."""
    paths = sorted(RESULTS.glob("demo_band_*.json"))
    assert {json.loads(p.read_text()).get("task", "verify") for p in paths} == {"verify", "answer"}
    for path in paths:
        recorded = json.loads(path.read_text())
        rule = recorded.get("pass_rule", {"min_gain": 0.3, "min_outcome": None})
        runs = merged_runs([path])
        assert len(runs) >= 10, path
        for figures in runs.values():
            if "failed" in figures:
                assert figures["passes"] is False, path
            elif rule["min_outcome"] is not None:
                assert figures["passes"] == (figures["outcome_confirmed_after"] >= rule["min_outcome"]), path
            else:
                gain = rule["min_gain"]
                assert figures["passes"] == (
                    figures["reward_gain"] >= gain and figures["ident_gain"] >= gain
                ), path


FAKE_DEMO = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
out, seed = Path(args[args.index("--out") + 1]), int(args[args.index("--seed") + 1])
with open(out.parent.parent / "calls.txt", "a") as calls:
    calls.write(f"{seed}\\n")
if seed == 1:
    print("a log line before the error")
    print("ragym: the warm start missed its target: copy accuracy 0.900 < 0.97")
    sys.exit(2)
out.mkdir(parents=True, exist_ok=True)
phase = {"reward_mean": 2.0, "ident_acc": 0.5, "outcome_identified": 0.4 + 0.5 * (seed == 0)}
metrics = {"before": phase, "after": phase, "wall_time_s": 1.0, "peak_rss_mb": 10.0}
(out / "metrics.json").write_text(json.dumps(metrics))
if seed == 2:  # a warm start imitated again once (ragym.demo.warm_start_target.restarts)
    (out / "warm_start").mkdir()
    attempts = [{"seed": 2, "missed": ["copy accuracy 0.9 < 0.97"]}, {"seed": 1002, "missed": []}]
    (out / "warm_start" / "warm_start.json").write_text(json.dumps({"attempts": attempts}))
"""


def test_a_run_that_fails_is_a_failing_row_and_the_other_runs_still_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A demo that exits with an error (seed 1's warm start missing its target) does not stop the pool: seeds 0
    and 2 still run, seed 1 is a row that fails with its log's last line as the reason, it is read back rather
    than run again, and the answer task passes a run on its outcome on confirmed questions (>= 0.5), not on gains
    (these fake runs gain nothing)."""
    import sys

    from benchmarks import demo_band

    script = tmp_path / "fake_demo.py"
    script.write_text(FAKE_DEMO)
    monkeypatch.setattr(demo_band, "DEMO_COMMAND", [sys.executable, str(script)])
    out = tmp_path / "band"
    argv = ["--out", str(out), "--seeds", "0-2", "--kernels", "machine", "--jobs", "2", "--task", "answer"]
    assert demo_band.main(argv) == 0
    runs = json.loads((out / "band.json").read_text())["runs"]
    assert (
        runs["machine/1"]["failed"] == "ragym: the warm start missed its target: copy accuracy 0.900 < 0.97"
    )
    assert [runs[f"machine/{s}"]["passes"] for s in range(3)] == [True, False, False]
    assert runs["machine/2"]["warm_starts"] == 2 and "warm_starts" not in runs["machine/0"]
    text = capsys.readouterr().out
    assert "| no | 2 | 1 s |" in text  # seed 2's row: fails, 2 warm starts, its wall time
    assert "all: 1 of 3 runs pass (1 failed before a result)" in text
    # a failed run's time is not among the figures of the runs that reached a result
    lines = band_lines(
        {("m", 0): {"failed": "x", "cpu_s": 1.0, "passes": False}, ("m", 1): {"cpu_s": 9.0, "passes": True}},
        ["m"],
    )
    assert (
        "  cpu_s: 9.000 (one run) (min 9.000, max 9.000)" in lines
        and lines[0] == "m: 1 of 2 runs pass (1 failed before a result)"
    )
    assert "| 1 | failed: ragym: the warm start missed" in text
    assert sorted((out / "calls.txt").read_text().split()) == ["0", "1", "2"]
    assert demo_band.main([*argv, "--collect"]) == 0 and demo_band.main(argv) == 0  # read back, not run again
    assert sorted((out / "calls.txt").read_text().split()) == ["0", "1", "2"]
    assert json.loads((out / "band.json").read_text())["runs"] == runs
    # the verify task's rule: both gains at least --min-gain, which these runs do not reach
    assert demo_band.main([*argv[:-2], "--collect"]) == 0  # the verify task's rule: gains, which none reach
    assert not any(r["passes"] for r in json.loads((out / "band.json").read_text())["runs"].values())


def test_the_answer_tasks_band_records_its_pass_rule_and_outcome_and_leaves_failed_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--write-band`` for the answer task: the outcome on confirmed questions is a band figure over the runs
    that reached a result, the failed run counts as a run that did not pass, and the demo's report places an
    answer run's outcome in that band under the task's own pass rule."""
    import sys

    from benchmarks import demo_band
    from ragym.rl.demo import report

    script = tmp_path / "fake_demo.py"
    script.write_text(FAKE_DEMO)
    monkeypatch.setattr(demo_band, "DEMO_COMMAND", [sys.executable, str(script)])
    monkeypatch.setattr(report, "BAND", tmp_path / "band.json")
    argv = ["--out", str(tmp_path / "b"), "--seeds", "0-2", "--kernels", "machine", "--task", "answer"]
    assert demo_band.main([*argv, "--jobs", "1", "--write-band"]) == 0
    band = report.read_band("answer")
    assert band is not None and (band["runs"], band["passed"]) == (3, 1)
    assert band["pass_rule"] == "answered 0.5 or more of the held-out questions whose entity they confirmed"
    outcome = band["figures"]["outcome_confirmed_after"]
    assert (outcome["min"], outcome["max"]) == pytest.approx((0.4, 0.9))  # seeds 2 and 0; seed 1 failed
    run = {"before": {"reward_mean": 2.0, "ident_acc": 0.5}, "after": {"reward_mean": 2.0, "ident_acc": 0.5}}
    lines = report.band_lines({**run, "after": {**run["after"], "outcome_identified": 0.2}}, band)
    assert "1 of them answered 0.5 or more" in lines[2]
    assert lines[-2].endswith("| 0.200 | below the range |") and "outcome on the questions" in lines[-2]
    verify_run = report.band_lines(run, band)  # no outcome in the run: that figure is left out
    assert not any("outcome" in line for line in verify_run[4:])
