"""The ``ragym`` dispatcher: every command names a function that exists, and dispatch reaches it."""

from __future__ import annotations

import pytest

from rl import cli


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_resolves_to_a_function(name: str) -> None:
    assert callable(cli.command_main(name))


def test_dispatch_passes_the_arguments_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(cli, "command_main", lambda name: lambda argv: seen.append((name, argv)) or 7)
    assert cli.main(["jobs", "list", "--x"]) == 7
    assert seen == [("jobs", ["list", "--x"])]
