"""Envs reach their built-in synthetic data through an installed entry point, never by importing data preparation
(the package graph, ``tests/test_package_graph.py``, checks that no env module imports above envs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.envs.registry import synthetic_data


def test_synthetic_data_comes_from_the_installed_provider(tmp_path: Path) -> None:
    from ragym.data_prep.synthetic_kb import cached_kb

    assert synthetic_data("kbvqa", "tiny") == str(cached_kb("tiny"))


def test_an_unknown_synthetic_source_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="no synthetic data 'nosuch' is installed"):
        synthetic_data("nosuch", "tiny")
