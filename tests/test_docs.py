"""The README and the docs site stay true to the repository: the site builds strictly (no broken link, missing
anchor or page left out of the nav), the README stays short and names every command, the recipe table names
every recipe, and every repository path or ``ragym.*`` module the text names exists."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from ragym.envs.kbvqa.env import KBVQAConfig
from ragym.rl.cli import COMMANDS
from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
README_MAX_LINES = 300
LAYOUT = ("envs", "rewards", "rl", "data_prep", "recipes", "launch", "tests", "benchmarks", "docs")
"""Top-level folders of the repository: a path in backticks that starts with one of them must exist."""
LAYERS = ("envs", "rewards", "rl", "data_prep")
"""The folders that install as ``ragym.<layer>``."""

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
REPO_PATH = re.compile(rf"(?<![\w./$~-])((?:{'|'.join(LAYOUT)})/[\w./*-]*)")
MODULE = re.compile(rf"(?<![\w./])ragym\.(?:{'|'.join(LAYERS)})(?:\.\w+)*")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def manual_pages() -> list[Path]:
    """The README and every page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def code_text(markdown: str) -> list[str]:
    """Everything the page writes in backticks: fenced blocks and inline code spans."""
    fenced = FENCE.findall(markdown)
    return fenced + SPAN.findall(FENCE.sub("", markdown))


def named_paths(markdown: str) -> set[str]:
    """Repository paths written in backticks (``recipes/kbvqa_tiny_cpu.yaml``, ``envs/retrieval/service/``)."""
    return {m.rstrip(".") for code in code_text(markdown) for m in REPO_PATH.findall(code)}


def named_modules(markdown: str) -> set[str]:
    """``ragym.<layer>...`` names written in backticks (modules, and the classes or functions in them)."""
    return {m for code in code_text(markdown) for m in MODULE.findall(code)}


def resolves(dotted: str) -> bool:
    """Whether ``ragym.<layer>.a.b.Name`` names a package or module of the repository, and the first name after
    the module is defined or imported in it; read from the files, so nothing is imported."""
    parts = dotted.split(".")[1:]
    path = REPO_ROOT / parts[0]
    for i, part in enumerate(parts[1:], start=1):
        if (path / part).is_dir():
            path = path / part
        elif (path / f"{part}.py").is_file():
            path = path / f"{part}.py"
        else:
            return defines(path / "__init__.py" if path.is_dir() else path, part)
        if path.suffix == ".py" and i + 1 < len(parts):
            return defines(path, parts[i + 1])
    return True


def defines(source: Path, name: str) -> bool:
    """Whether a module file defines ``name`` (def, class, assignment) or imports it."""
    pattern = (
        rf"^(?:async def|def|class) {name}\b|^{name}\s*[:=]|^(?:from|import) [^\n]*\b{name}\b|^\s+{name},"
    )
    return source.is_file() and re.search(pattern, source.read_text(), re.M) is not None


def table_after(markdown: str, header: str) -> list[list[str]]:
    """The body rows of the markdown table whose header line starts with ``header``, as lists of cells."""
    table = markdown[markdown.index(header) :].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO_ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) < README_MAX_LINES


@pytest.mark.parametrize("page", [README, DOCS / "index.md"], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_the_command_tables_name_every_command(page: Path) -> None:
    """README's command table (one line each) and the manual's (with each command's arguments)."""
    rows = table_after(page.read_text(), "| command |")
    listed = {name for row in rows for name in re.findall(r"ragym ([a-z][\w-]*)", row[0])}
    assert set(COMMANDS) - listed == set(), "commands missing from the command table"
    assert listed - set(COMMANDS) == set(), "the command table names commands that do not exist"


def test_the_recipe_table_names_every_recipe() -> None:
    """docs/recipes.md lists every YAML under recipes/ (reward recipes and agent-loop configs aside, which have
    their own sections) and nothing else, so the table cannot drift from the folder again."""
    rows = table_after((DOCS / "recipes.md").read_text(), "| recipe | what |")
    listed = {cell.strip("` ") for row in rows for cell in row[0].split(",")}
    root = REPO_ROOT / "recipes"
    shipped = {
        str(p.relative_to(root).with_suffix(""))
        for p in root.rglob("*.yaml")
        if p.parent.name not in ("rewards", "agent_loops")
    }
    assert shipped - listed == set(), "recipes missing from docs/recipes.md"
    assert listed - shipped == set(), "docs/recipes.md lists recipes that do not exist"


def test_the_kbvqa_config_table_lists_fields_with_their_defaults() -> None:
    """docs/kbvqa.md's config table names ``KBVQAConfig`` fields only (``make_env``'s retrieval keywords are not:
    ``KBVQAEnv(retrieval_url=...)`` is refused), each with its default."""
    rows = table_after((DOCS / "kbvqa.md").read_text(), "| field | default | meaning |")
    listed = {row[0].strip("`"): row[1].strip("`") for row in rows}
    defaults = {f.name: str(f.default) for f in dataclasses.fields(KBVQAConfig)}
    assert sorted(set(listed) - set(defaults)) == [], "the table lists names that are not KBVQAConfig fields"
    assert {name: defaults[name] for name in listed} == listed


@pytest.mark.parametrize("page", manual_pages(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_repository_path_in_backticks_exists(page: Path) -> None:
    missing = sorted(p for p in named_paths(page.read_text()) if not any(REPO_ROOT.glob(p.rstrip("/"))))
    assert missing == []


@pytest.mark.parametrize("page", manual_pages(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_ragym_module_in_backticks_exists(page: Path) -> None:
    assert sorted(m for m in named_modules(page.read_text()) if not resolves(m)) == []


def heading_ids(page: Path) -> set[str]:
    """The anchors mkdocs gives a page's headings (its toc extension's slugs)."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {slugify(heading.replace("`", ""), "-") for heading in headings}


def test_the_readmes_links_reach_files_and_headings() -> None:
    """README is read on the repository host, outside the site build: its links into docs/ are checked here."""
    broken = []
    for target in LINK.findall(README.read_text()):
        if re.match(r"\w+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = REPO_ROOT / path if path else README
        if not page.exists() or (anchor and anchor not in heading_ids(page)):
            broken.append(target)
    assert broken == []


def test_the_checks_catch_what_they_look_for() -> None:
    """The path and module checks flag a moved file and a moved module, and skip paths outside the repository."""
    text = (
        "see `envs/retrieval.py`, `runs/demo/kb`, `$RAGYM_DATA_DIR/envs/x` and `ragym.envs.service.batcher`"
    )
    assert named_paths(text) == {"envs/retrieval.py"}
    assert not any(REPO_ROOT.glob("envs/retrieval.py"))
    assert named_modules(text) == {"ragym.envs.service.batcher"}
    assert not resolves("ragym.envs.service.batcher")
    assert resolves("ragym.envs.retrieval.service.batcher")
    assert not resolves("ragym.envs.kbvqa.actions.no_such_function")
