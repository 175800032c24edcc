"""``ragym serve`` refuses a folder that is not there before it starts serving (not a load error after)."""

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
