"""The ``ragym`` dispatcher: every command names a function that exists, and dispatch reaches it."""

from __future__ import annotations

import pytest

from ragym.rl import cli


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_resolves_to_a_function(name: str) -> None:
    assert callable(cli.command_main(name))


def test_dispatch_passes_the_arguments_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(cli, "command_main", lambda name: lambda argv: seen.append((name, argv)) or 7)
    assert cli.main(["jobs", "list", "--x"]) == 7
    assert seen == [("jobs", ["list", "--x"])]


@pytest.mark.parametrize("verbose", [False, True])
def test_a_commands_log_is_ragyms_own_unless_verbose(tmp_path, verbose: bool) -> None:
    """Libraries' INFO lines (faiss's ten loader lines, bm25s's debug notes, verl's engine notices) stay out of
    a command's output unless ``--verbose``; ragym's own INFO lines and every warning stay in."""
    import subprocess
    import sys

    flags = ["--verbose"] if verbose else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragym.rl.cli",
            *flags,
            "prep",
            "synthetic-kb",
            "--out",
            str(tmp_path / "kb"),
            "--preset",
            "tiny",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [line for line in done.stderr.splitlines() if " INFO " in line or " DEBUG " in line]
    assert any("ragym.data_prep.synthetic_kb: wrote synthetic-tiny KB" in line for line in lines)
    foreign = [line for line in lines if line.split(" ", 4)[3].split(".")[0] not in cli.OWN_LOGGERS]
    if verbose:
        assert any("faiss.loader" in line for line in foreign)
    else:
        assert foreign == [] and "faiss.loader" not in done.stderr
        assert lines[0].split(" ", 4)[3].startswith("ragym.data_prep.")


@pytest.mark.parametrize(
    ("name", "expected"), [("train", "PASSIVE"), ("eval", "PASSIVE"), ("serve", "unset")]
)
def test_commands_ask_for_the_passive_wait_policy_before_torch_loads(name: str, expected: str) -> None:
    """Set in the command's process before its module imports torch, so torch's OpenMP reads it, and inherited by
    what the command starts (verl's trainer, its Ray workers); ``ragym serve`` has its own ``--omp-wait-policy``."""
    import os
    import subprocess
    import sys

    code = (
        "import os, subprocess, sys; from ragym.rl.cli import prepare_process; prepare_process(sys.argv[1]); "
        "import torch; child = \"import os; print(os.environ.get('OMP_WAIT_POLICY', 'unset'))\"; "
        "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True).stdout)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-c", code, name], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == [expected]


def test_dispatch_prepares_the_process_before_it_imports_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    order = []
    monkeypatch.setattr(cli, "prepare_process", lambda name: order.append(("prepare", name)))
    monkeypatch.setattr(cli, "command_main", lambda name: order.append(("import", name)) or (lambda argv: 0))
    assert cli.main(["train", "--recipe", "x"]) == 0
    assert order == [("prepare", "train"), ("import", "train")]
