"""ragym's package graph: imports point only down the layers, and no set of modules imports itself round.

Layers, bottom first: retrieval (``ragym.envs.retrieval``: retrievers, encoders, indexes, the service, ranking
metrics), envs (the shared core and one package per environment), rewards, data_prep, rl. A module may import its
own layer and those below it. Every import that can run counts, inside functions too (a lazy import is still a
dependency); imports under ``if TYPE_CHECKING:`` are annotations only and never run.

One exception, the env's hooks (``envs/<env>/hooks.py``, ``ragym.envs.hooks``): the one module of an env package
that may import ``data_prep`` as well (its toy rows are verl rows, written by data_prep's builders). No module
imports it; the env registry loads it by the name the env package registers.

Inside ``rl/``, rooms (its sub-packages and top-level modules) follow a pinned order, ``RL_ORDER``: a room imports
only rooms of the tiers below its own, so the two engines (one tier) never import each other.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("envs", "rewards", "rl", "data_prep")
ALLOWED = {
    "hooks": {"hooks", "data_prep", "envs", "retrieval"},
    "retrieval": {"retrieval"},
    "envs": {"envs", "retrieval"},
    "rewards": {"rewards", "envs", "retrieval"},
    "data_prep": {"data_prep", "rewards", "envs", "retrieval"},
    "rl": {"rl", "data_prep", "rewards", "envs", "retrieval"},
}
"""Which layers each layer may import."""


RL_ORDER = (
    ("errors", "correction", "off_policy", "credit", "export_args"),
    ("lora", "guards", "data", "core"),
    ("models", "recipe", "view"),
    ("agent_loop", "export", "retriever"),
    ("cotrain", "eval", "tiny", "budget"),
    ("engine", "verl_plugin"),
    ("train", "cluster", "prep"),
    ("demo",),
    ("ablate", "cli"),
)
"""``rl/``'s rooms in tiers, bottom first (docs/development.md, "Rooms inside rl/"): a room imports only rooms of
lower tiers."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["ragym", *parts])


MODULES = {module_name(p): p for folder in FOLDERS for p in sorted((REPO / folder).rglob("*.py"))}


def is_hooks(module: str) -> bool:
    parts = module.split(".")
    return len(parts) == 4 and parts[:2] == ["ragym", "envs"] and parts[3] == "hooks"


def layer(module: str) -> str:
    if is_hooks(module):
        return "hooks"
    if module == "ragym.envs.retrieval" or module.startswith("ragym.envs.retrieval."):
        return "retrieval"
    return module.split(".")[1]


def imports(module: str) -> set[str]:
    """The ragym modules ``module`` imports (``from pkg import name`` counts ``pkg.name`` when that is a module)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for child in node.body
        for inner in ast.walk(child)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name in MODULES and name != module}


GRAPH = nx.DiGraph((module, target) for module in MODULES for target in imports(module))


def test_the_graph_sees_every_layer() -> None:
    assert {layer(m) for m in MODULES} == set(ALLOWED)
    assert GRAPH.number_of_edges() > 500  # the parser reads ragym's imports, not nothing


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_imports_point_down_the_layers(source: str) -> None:
    upward = sorted(
        f"{a} -> {b}" for a, b in GRAPH.edges if layer(a) == source and layer(b) not in ALLOWED[source]
    )
    assert not upward, f"{source} imports above itself:\n" + "\n".join(upward)


def test_no_module_imports_an_env_s_hooks() -> None:
    hooks = {m for m in MODULES if is_hooks(m)}
    assert len(hooks) >= 4  # every shipped env has them
    importers = sorted(f"{a} -> {b}" for a, b in GRAPH.edges if b in hooks)
    assert not importers, "the registry loads an env's hooks by name; these import them:\n" + "\n".join(
        importers
    )


def rl_room(module: str) -> str | None:
    """The room of an ``rl/`` module: its sub-package, or the top-level module itself (None: not in ``rl/``)."""
    parts = module.split(".")
    return parts[2] if parts[1] == "rl" and len(parts) > 2 else None


TIER = {room: tier for tier, rooms in enumerate(RL_ORDER) for room in rooms}


def test_every_rl_room_has_a_place_in_the_order() -> None:
    rooms = {rl_room(m) for m in MODULES} - {None}
    assert sorted(rooms - set(TIER)) == [], "rooms of rl/ missing from RL_ORDER (place each in a tier)"
    assert sorted(set(TIER) - rooms) == [], "RL_ORDER names rooms rl/ does not have"
    assert sum(map(len, RL_ORDER)) == len(TIER)  # a room in one tier only


def test_rl_rooms_import_only_lower_tiers() -> None:
    cross = [(a, b) for a, b in GRAPH.edges if rl_room(a) and rl_room(b) and rl_room(a) != rl_room(b)]
    assert len(cross) > 100  # the rooms do import each other: the check below reads real edges
    upward = sorted(
        f"{a} -> {b} ({rl_room(a)}: tier {TIER[rl_room(a)]}, {rl_room(b)}: tier {TIER[rl_room(b)]})"
        for a, b in cross
        if TIER[rl_room(b)] >= TIER[rl_room(a)]
    )
    assert not upward, "rl/ rooms import their own tier or above (RL_ORDER):\n" + "\n".join(upward)


def test_no_import_circle() -> None:
    circles = [sorted(c) for c in nx.strongly_connected_components(GRAPH) if len(c) > 1]
    assert not circles, "modules that import each other round:\n" + "\n".join(map(str, circles))


def test_installing_ragym_puts_only_ragym_on_the_path(tmp_path: Path) -> None:
    """The distribution's one top-level name is ``ragym``; outside the repository ``envs``, ``rl``, ``rewards`` and
    ``data_prep`` are not importable (the editable install maps ``ragym.envs`` onto ``envs/`` and nothing else)."""
    from importlib.metadata import distribution

    assert distribution("ragym").read_text("top_level.txt").split() == ["ragym"]
    probe = "import importlib.util as u; print([n for n in ('envs', 'rl', 'rewards', 'data_prep') if u.find_spec(n)])"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert found == "[]"
    spec = subprocess.run(
        [sys.executable, "-c", "import ragym.envs.kbvqa.env as m; print(m.__name__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert spec.stdout.strip() == "ragym.envs.kbvqa.env"
