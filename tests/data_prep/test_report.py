"""``PrepReport``: rows in = rows out + rows rejected per split, checked before it is saved or printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.data_prep.report import EXAMPLES_PER_REASON, PrepReport, UnbalancedReport


def _report() -> PrepReport:
    report = PrepReport("toy")
    report.read("train", 4)
    report.keep("train", 2)
    report.reject("train", "missing_image", "row 2: no file")
    report.reject("train", "no_gold", "row 3")
    report.read("kb")
    report.keep("kb")
    return report


def test_the_saved_json_has_one_entry_per_split(tmp_path: Path) -> None:
    report = _report()
    report.details["num_entities"] = 7
    saved = json.loads(report.save(tmp_path).read_text())
    assert saved == {
        "dataset": "toy",
        "splits": {
            "train": {
                "num_rows_in": 4,
                "num_rows_out": 2,
                "num_rows_rejected": 2,
                "rejected_by_reason": {"missing_image": 1, "no_gold": 1},
            },
            "kb": {"num_rows_in": 1, "num_rows_out": 1, "num_rows_rejected": 0, "rejected_by_reason": {}},
        },
        "rejected_examples": [
            {"split": "train", "reason": "missing_image", "detail": "row 2: no file"},
            {"split": "train", "reason": "no_gold", "detail": "row 3"},
        ],
        "details": {"num_entities": 7},
    }


def test_the_printed_form_is_one_line_per_split_then_the_details() -> None:
    report = _report()
    report.details["recall"] = {"val": 0.5}
    assert report.format().splitlines() == [
        "toy: rows in = rows out + rows rejected",
        "  train  4 = 2 + 2  (missing_image 1, no_gold 1)",
        "  kb     1 = 1 + 0",
        '  recall: {"val": 0.5}',
    ]


@pytest.mark.parametrize("unbalance", ["read", "keep", "reject"])
def test_counts_that_do_not_add_up_fail_to_save_or_print(tmp_path: Path, unbalance: str) -> None:
    report = _report()
    if unbalance == "reject":
        report.reject("kb", "duplicate_kb_key", "kb.json: key 'Q1' appears again")
    else:
        getattr(report, unbalance)("train")
    with pytest.raises(UnbalancedReport, match="toy: rows in != rows out"):
        report.save(tmp_path)
    with pytest.raises(UnbalancedReport):
        report.format()
    assert not (tmp_path / "report.json").exists()


def test_examples_are_bounded_per_reason_and_counts_are_not() -> None:
    report = PrepReport("toy")
    num = EXAMPLES_PER_REASON + 3
    report.read("train", num + 1)
    for i in range(num):
        report.reject("train", "bad_json", f"row {i}")
    report.reject("train", "empty_text", "row last")
    data = report.as_dict()
    assert data["splits"]["train"]["rejected_by_reason"] == {"bad_json": num, "empty_text": 1}
    kept = [e["detail"] for e in data["rejected_examples"]]
    assert kept == [f"row {i}" for i in range(EXAMPLES_PER_REASON)] + ["row last"]
