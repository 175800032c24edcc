"""``ragym serve`` refuses a folder that is not there, or a setting the service refuses, before it starts serving (not a
load error after, not a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ragym.envs.serving.cli import main


@pytest.mark.parametrize("flag", ["--kb-dir", "--doc-store-root"])
def test_a_missing_folder_stops_ragym_serve_before_it_listens(tmp_path: Path, flag: str) -> None:
    with pytest.raises(FileNotFoundError, match=f"{flag} .*nowhere: no such folder"):
        main([flag, str(tmp_path / "nowhere"), "--port", "1"])


def test_the_command_says_it_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ragym.rl.cli", "serve", "--kb-dir", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"ragym serve: --kb-dir {tmp_path / 'nowhere'}: no such folder" in done.stderr


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--max-batch-size", "0"], "max_batch_size must be >= 1, got 0"),
        (["--search-workers", "0"], "search_workers must be >= 1"),
        (["--batch-splits", "-1"], "batch_splits must be >= 1, got -1"),
    ],
)
def test_a_setting_the_service_refuses_is_one_line(
    tmp_path: Path, flags: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--kb-dir", str(tmp_path), *flags, "--port", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"ragym serve: error: {why}" in err and "Traceback" not in err


def test_a_port_in_use_is_one_line_before_anything_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from ragym.envs.serving import catalog

    def no_load(spec: object) -> dict:
        raise AssertionError("the indexes were loaded for a port it cannot listen on")

    monkeypatch.setattr(catalog, "load_catalog", no_load)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit, match=f"ragym serve: cannot listen on 127.0.0.1:{port}: .*in use"):
            main(["--kb-dir", str(tmp_path), "--port", str(port)])
