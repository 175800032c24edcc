"""Shared fixtures of the data-prep tests: the three real-format benchmarks, prepared once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.data_prep.prep import prep_dataset
from tests.data_prep import kbvqa_fixtures as fx

# K=2, Rej_max=0: a pool of 2 of 7 entities, so the fixtures' black query image is unreachable.
RETRIEVAL = ["--candidates-per-batch", "2", "--max-rejections", "0"]


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict, dict]]:
    """Each dataset's fixture, prepared once: name -> (KB folder, report, expected rejections)."""
    root = tmp_path_factory.mktemp("kbvqa_real")
    out = {}
    for name in ("infoseek", "evqa", "mmhops"):
        expected = getattr(fx, f"write_{name}")(root / "raw" / name)
        report = prep_dataset(
            name, ["--raw", str(root / "raw" / name), "--out", str(root / name), *RETRIEVAL]
        )
        out[name] = (root / name, report, expected)
    return out
