"""Fixtures of the budget report tests: rows of every env over real-size photos, and a tokenizer, built once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rl.budget import fixtures


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An English BPE tokenizer folder (``fixtures.english_tokenizer``)."""
    return fixtures.english_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def paper_rows(tmp_path_factory: pytest.TempPathFactory):
    """``paper_rows(env)``: the rows file of ``kbvqa``, ``r3g``, ``memora`` or ``docmemo``, built on first use."""
    built: dict[str, Path] = {}
    builders = {
        "kbvqa": fixtures.kbvqa_rows,
        "r3g": fixtures.r3g_rows,
        "memora": fixtures.memora_rows,
        "docmemo": fixtures.docmemo_rows,
    }

    def get(env: str) -> Path:
        if env not in built:
            built[env] = builders[env](tmp_path_factory.mktemp(env))
        return built[env]

    return get
