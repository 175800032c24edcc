"""Static tools resolve every ``ragym.*`` import written in the repository, as the editable install does at run time.

setup.py installs the top-level folders as ``ragym.*`` through setuptools' editable finder, which only runs when
Python imports; pyright and jedi read files. ``ragym/`` holds one relative link per layer folder
(``ragym/envs -> ../envs``), so a static tool that looks from the repository root finds ``ragym.envs`` in
``envs/``, and a module added later is found without reinstalling (docs/development.md).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("envs", "rewards", "rl", "data_prep")
SOURCE_FOLDERS = (*LAYERS, "tests", "benchmarks", "launch")
MISSING = "ragym.envs.no_such_module"
"""An import that does not exist: each tool must flag it, so that a check that resolves nothing cannot pass."""


def is_module(name: str) -> bool:
    """Whether ``ragym.a.b`` is a module or package in the layer folders (``a/b.py`` or ``a/b/``)."""
    path = REPO.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or path.is_dir()


def ragym_modules() -> list[str]:
    """Every ``ragym`` module that a Python file in the repository imports: ``import ragym.a.b``,
    ``from ragym.a.b import name`` and ``from ragym.a import b`` where ``b`` is a module."""
    modules: set[str] = set()
    for folder in SOURCE_FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.ImportFrom)
                    and node.level == 0
                    and (node.module or "").startswith("ragym.")
                ):
                    modules.add(node.module or "")
                    modules.update(
                        f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")
                    )
                elif isinstance(node, ast.Import):
                    modules.update(a.name for a in node.names if a.name.startswith("ragym."))
    return sorted(modules)


def test_the_links_are_the_layer_folders() -> None:
    """``ragym/`` is a namespace (no ``__init__.py``, as installed) of relative links, one per folder setup.py maps."""
    links = REPO / "ragym"
    assert sorted(p.name for p in links.iterdir()) == sorted(LAYERS)
    for layer in LAYERS:
        assert os.readlink(links / layer) == f"../{layer}"
        assert (links / layer).resolve() == REPO / layer


def test_pyright_resolves_every_ragym_import(tmp_path: Path) -> None:
    """pyright, with the project's venv (pyproject's ``[tool.pyright]``), finds every imported ``ragym`` module."""
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    if pyright is None:
        pytest.skip("pyright is not installed (setup.py's dev extra installs it)")
    modules = ragym_modules()
    assert len(modules) > 200, f"the walk found {len(modules)} modules, too few to be the repository's"
    lines = [f"import {name}" for name in [*modules, MISSING]]
    probe = tmp_path / "probe.py"
    probe.write_text("".join(f"{line}\n" for line in lines))
    result = subprocess.run(
        [pyright, "--outputjson", "--project", str(REPO), str(probe)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(result.stdout)
    assert report["summary"]["filesAnalyzed"] == 1, result.stdout[-2000:]
    errors = [
        f"{lines[d['range']['start']['line']]}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    assert errors == [f'import {MISSING}: Import "{MISSING}" could not be resolved'], "\n".join(errors)


def test_jedi_goes_to_the_layer_folder() -> None:
    """Go-to-definition on each imported ``ragym`` module lands in that layer's top-level folder."""
    jedi = pytest.importorskip("jedi", reason="jedi is not installed (setup.py's dev extra installs it)")
    modules = ragym_modules()
    names = [*modules, MISSING]
    source = "".join(f"import {name}\n" for name in names)
    script = jedi.Script(source, path=REPO / "tests" / "probe.py", project=jedi.Project(REPO))
    wrong = {}
    for line, name in enumerate(names, start=1):
        found = [
            d.module_path for d in script.goto(line, len("import ") + len(name) - 1, follow_imports=True)
        ]
        if name == MISSING:
            assert not any(found), f"jedi found {MISSING}: {found}"
        elif (
            len(found) != 1
            or found[0] is None
            or not found[0].resolve().is_relative_to(REPO / name.split(".")[1])
        ):
            wrong[name] = found
    assert not wrong, f"{len(wrong)} of {len(modules)} modules: {wrong}"
