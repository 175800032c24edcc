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
        [sys.executable, "-m", "ragym.rl.cli", *flags, "prep", "synthetic-kb", "--out", str(tmp_path / "kb"), "--preset", "tiny"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if " INFO " in line or " DEBUG " in line]
    assert any("ragym.data_prep.synthetic_kb: wrote synthetic-tiny KB" in line for line in lines)
    foreign = [line for line in lines if line.split(" ", 4)[3].split(".")[0] not in cli.OWN_LOGGERS]
    if verbose:
        assert any("faiss.loader" in line for line in foreign)
    else:
        assert foreign == [] and "faiss.loader" not in done.stderr
        assert lines[0].split(" ", 4)[3].startswith("ragym.data_prep.")
