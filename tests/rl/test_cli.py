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


HEAVY_MODULES = ("torch", "transformers", "verl", "vllm", "sentence_transformers")
"""What a command's ``--help`` must not import: 5-10 s of CPU before a line of help (``ragym eval`` took 9 s)."""

_PROBE = """
import contextlib, io, json, os, sys
from ragym.rl import cli

def probe(argv):  # in a forked child: the parent stays free of every command's imports
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = cli.main(argv)
        except SystemExit as stop:
            code = stop.code
        heavy = [m for m in sys.argv[1].split(",") if m in sys.modules]
        os.write(write, json.dumps([code, heavy, out.getvalue()]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as got:
        data = got.read()
    os.waitpid(pid, 0)
    return json.loads(data)

print(json.dumps({" ".join(a): probe(a) for a in json.loads(sys.argv[2])}))
"""


def _probe(argvs: list[list[str]]) -> dict[str, list]:
    """(exit status, heavy modules imported, output) of ``ragym ARGV`` for each argv, each in a fresh fork."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(HEAVY_MODULES), json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout)


def test_every_commands_help_and_usage_error_come_before_torch_and_verl_load() -> None:
    """``ragym NAME --help`` prints the command's usage and a bad flag is argparse's exit status 2, each without
    importing torch, transformers, verl, vLLM or sentence-transformers (``cli.ARGUMENTS`` parses the commands
    whose module imports them)."""
    argvs = [[name, flag] for name in sorted(cli.COMMANDS) for flag in ("--help", "--no-such-flag")]
    found = _probe(argvs)
    for name in cli.COMMANDS:
        code, heavy, out = found[f"{name} --help"]
        assert (code, heavy) == (0, []), name
        assert out.startswith(f"usage: ragym {name}"), (name, out[:80])
        code, heavy, out = found[f"{name} --no-such-flag"]
        assert (code, heavy) == (2, []), name


@pytest.mark.parametrize("name", sorted(cli.ARGUMENTS))
def test_a_light_parser_is_the_one_its_command_parses_with(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dispatcher's parse (``cli.ARGUMENTS``) and the command's own ``main`` print the same help: one parser."""
    with pytest.raises(SystemExit):
        cli.check_arguments(name, ["--help"])
    light = capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.command_main(name)(["--help"])
    assert capsys.readouterr().out == light and light.startswith(f"usage: ragym {name}")
