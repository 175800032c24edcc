"""Every registered prep, run through ``ragym prep NAME`` on its tiny fixture, writes the one report shape
(``ragym.data_prep.report``) and accounts for every row: rows in = rows out + rows rejected, per split."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ragym.data_prep import prep
from tests.data_prep import kbvqa_fixtures as kbvqa
from tests.data_prep.bright_fixtures import write_bright, write_mm_bright
from tests.data_prep.conftest import RETRIEVAL
from tests.data_prep.mragbench_fixture import write_fixture as write_mragbench
from tests.data_prep.test_mmlongbench_doc import sample, write_pdf
from tests.rl.retriever_fixtures import write_pairs_jsonl


def _kbvqa(name: str) -> Callable[[Path], list[str]]:
    def args(raw: Path) -> list[str]:
        getattr(kbvqa, f"write_{name}")(raw)
        return ["--raw", str(raw), *RETRIEVAL]

    return args


def _mmlongbench_doc(raw: Path) -> list[str]:
    (raw / "documents").mkdir(parents=True)
    write_pdf(raw / "documents" / "report.pdf")
    samples = [sample("report.pdf", "[1]", "north"), sample("absent.pdf", "[1]")]
    (raw / "samples.json").write_text(json.dumps(samples))
    return ["--samples", str(raw / "samples.json"), "--documents", str(raw / "documents")]


def _stackexchange(raw: Path) -> list[str]:
    raw.mkdir(parents=True)
    path = write_pairs_jsonl(raw / "pairs.jsonl")
    with path.open("a", encoding="utf-8") as f:
        f.write("{not json\n")
    return ["--input", str(path)]


FIXTURE_ARGS: dict[str, Callable[[Path], list[str]]] = {
    "infoseek": _kbvqa("infoseek"),
    "evqa": _kbvqa("evqa"),
    "mmhops": _kbvqa("mmhops"),
    "mragbench": lambda raw: ["--raw", str(write_mragbench(raw))],
    "bright": lambda raw: ["--raw", str(write_bright(raw)), "--task", "biology"],
    "mm-bright": lambda raw: ["--raw", str(write_mm_bright(raw)), "--domain", "academia"],
    "mmlongbench-doc": _mmlongbench_doc,
    "stackexchange": _stackexchange,
}
"""Each prep that turns input rows into rows: the arguments (less ``--out``) that run it on its fixture."""

NO_ROWS_REPORT = {
    "mix": "samples already prepared rows; it rejects none",
    "kb-images": "downloads images, counted in its own summary",
    "synthetic-kb": "generates its data, it reads no input rows",
    "image-pack": "packs a KB's images, it reads no input rows",
}
"""The registered preps that read no input rows to account for, and why."""


def test_every_registered_prep_is_covered() -> None:
    assert set(FIXTURE_ARGS) | set(NO_ROWS_REPORT) == set(prep.PREPS)
    assert not set(FIXTURE_ARGS) & set(NO_ROWS_REPORT)


@pytest.mark.parametrize("name", sorted(FIXTURE_ARGS))
def test_each_prep_writes_the_one_report_and_it_adds_up(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    # data preparation alone (the budget report that ``ragym prep`` adds is not data preparation's)
    assert prep.main([name, *FIXTURE_ARGS[name](tmp_path / "raw"), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report) == {"dataset", "splits", "rejected_examples", "details"}
    assert report["splits"], "a prep that read rows reports at least one split"
    counts_keys = {"num_rows_in", "num_rows_out", "num_rows_rejected", "rejected_by_reason"}
    for split, counts in report["splits"].items():
        assert set(counts) == counts_keys, split
        assert counts["num_rows_rejected"] == sum(counts["rejected_by_reason"].values()), split
        assert counts["num_rows_in"] == counts["num_rows_out"] + counts["num_rows_rejected"], split
    for example in report["rejected_examples"]:
        assert example["reason"] in report["splits"][example["split"]]["rejected_by_reason"]
    # every fixture holds broken rows, each kept as an example
    assert (
        sum(c["num_rows_rejected"] for c in report["splits"].values()) > 0 < len(report["rejected_examples"])
    )
    assert capsys.readouterr().out.startswith(f"{report['dataset']}: rows in = rows out + rows rejected\n")
