"""The cotrain grid's retriever recall by step: means over seeds and the paired difference, in results and report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.rl.ablate.cli import main
from ragym.rl.ablate.grids import GRIDS, Grid, Variant

GRID = Grid(
    "fake_cotrain",
    "kbvqa",
    (Variant("frozen"), Variant("cotrain")),
    ("ident_acc", "retriever_recall@3"),
    (),
    "a fake table",
)
# variant -> seed -> recall@3 at steps 1 and 4 (the frozen retriever never changes; the co-trained one does)
RECALL = {"frozen": {0: [0.4, 0.4], 1: [0.4, 0.4]}, "cotrain": {0: [0.4, 0.5], 1: [0.4, 0.7]}}


def fake_run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
    """A finished run that logged its serving retriever's held-out recall at steps 1 and 4."""
    curve = [{"step": t, "recall@3": r} for t, r in zip((1, 4), RECALL[variant.name][seed], strict=True)]
    metrics = {"ident_acc": 0.5, "retriever_recall@3": curve[-1]["recall@3"]}
    # the policy's evaluation before GRPO knows nothing of the retriever: the grid takes it from the curve
    return {
        "metrics": metrics,
        "before_grpo": {"ident_acc": 0.0},
        "wall_time_s": 1.0,
        "retriever_curve": curve,
    }


def test_recall_by_step_has_each_arms_mean_and_the_paired_difference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(GRIDS, "fake_cotrain", GRID)
    monkeypatch.setattr("ragym.rl.ablate.cli.runner_for", lambda kind: fake_run)
    assert (
        main(["fake_cotrain", "--out", str(tmp_path), "--seeds", "2", "--jobs", "1", "--task", "verify"]) == 0
    )
    found = json.loads((tmp_path / "results.json").read_text())["retriever_by_step"]
    assert found["steps"] == [1, 4]
    cotrain, difference = (
        found["variants"]["cotrain"]["recall@3"],
        found["differences"]["cotrain"]["recall@3"],
    )
    assert cotrain[1]["mean"] == pytest.approx(0.6)  # (0.5 + 0.7) / 2
    assert difference[0]["per_seed"] == [0.0, 0.0]
    assert difference[1]["per_seed"] == pytest.approx([0.1, 0.3]) and difference[1]["mean"] == pytest.approx(
        0.2
    )
    assert "frozen" not in found["differences"]
    results = json.loads((tmp_path / "results.json").read_text())
    gain = results["grpo_movement"]["variants"]["cotrain"]["gain"]["retriever_recall@3"]
    assert gain["per_seed"] == pytest.approx([0.1, 0.3])  # from step 1's recall, before any swap
    report = (tmp_path / "report.md").read_text()
    assert "## Retriever recall by step" in report and "| 4 | 0.400" in report and "+0.200 [" in report
