"""Environments depend on nothing above them: no module in envs/ imports data preparation or rl/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ragym.envs.registry import synthetic_data

ENVS_DIR = Path(__file__).resolve().parents[2] / "envs"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(ENVS_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(ENVS_DIR)))
def test_env_modules_do_not_import_data_prep_or_rl(path: Path) -> None:
    above = {m for m in _imported_modules(path) if m.split(".")[0] in {"data_prep", "rl"}}
    assert not above, f"{path.name} imports {sorted(above)}"


def test_synthetic_data_comes_from_the_installed_provider(tmp_path: Path) -> None:
    from ragym.data_prep.synthetic_kb import cached_kb

    assert synthetic_data("kbvqa", "tiny") == str(cached_kb("tiny"))


def test_an_unknown_synthetic_source_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="no synthetic data 'nosuch' is installed"):
        synthetic_data("nosuch", "tiny")
