"""``ragym train --engine verl``'s process set-up: what the trainer's environment carries (no trainer runs here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ragym.rl.engine import verl_local


@pytest.mark.parametrize(
    ("ray_address", "preset", "expected"),
    [
        (None, None, "0"),  # a Ray instance the trainer starts: its workers at the trainer's own priority
        (None, "15", "15"),  # the user's value wins (15 is Ray's default)
        ("127.0.0.1:6379", None, None),  # joining a cluster: its raylet is running already, nothing to set
    ],
)
def test_the_trainers_ray_workers_run_at_its_priority(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ray_address: str | None,
    preset: str | None,
    expected: str | None,
) -> None:
    """At Ray's default niceness (15) every busy process on the machine starved the workers: a one-step toy run
    beside two CPU-bound processes took 21 min against 4 at niceness 0."""
    config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)}})
    monkeypatch.setattr(
        verl_local, "verl_command", lambda *a: (["python", "-m", "verl.trainer.main_ppo"], config)
    )
    for name, value in (("RAY_ADDRESS", ray_address), (verl_local.WORKER_NICENESS_ENV, preset)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    seen: dict[str, str] = {}

    def trainer(command: list[str], env: dict[str, str], check: bool) -> subprocess.CompletedProcess:
        seen.update(env)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(verl_local.subprocess, "run", trainer)
    assert verl_local.run_verl("kbvqa_tiny_cpu", [], network="host") == 0
    assert seen.get(verl_local.WORKER_NICENESS_ENV) == expected
