"""``ragym train --engine verl`` joining a running Ray instance (``RAY_ADDRESS``), as ``make test``'s runs join their
worker's: the command carries none of the start-up arguments ``ray.init`` refuses when it joins."""

from __future__ import annotations

import subprocess

import pytest

from ragym.rl.verl_plugin import verl_local


@pytest.mark.parametrize("ray_address", [None, "127.0.0.1:6390"])
def test_a_joining_run_drops_only_the_ray_start_up_overrides(
    monkeypatch: pytest.MonkeyPatch, ray_address: str | None
) -> None:
    monkeypatch.setattr(
        verl_local, "gpu_present", lambda: False
    )  # the CPU platform's overrides, as in make test
    if ray_address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", ray_address)
    seen: list[str] = []

    def trainer(command: list[str], env: dict[str, str], check: bool) -> subprocess.CompletedProcess:
        seen.extend(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(verl_local.subprocess, "run", trainer)
    assert verl_local.run_verl("kbvqa_qwen2_5_vl_7b", ["trainer.total_training_steps=1"], network="host") == 0
    starting = [arg for arg in seen if arg.lstrip("+").startswith(verl_local.RAY_INIT_KEYS)]
    if ray_address is None:  # a Ray instance the trainer starts: the CPU platform's logical CPUs and GPUs
        assert (
            "ray_kwargs.ray_init.num_cpus=16" in starting
            and "+ray_kwargs.ray_init.include_dashboard=false" in starting
        )
    else:
        assert starting == []
    # Everything else reaches the trainer either way.
    assert {"actor_rollout_ref.actor.strategy=fsdp2", "trainer.total_training_steps=1"} <= set(seen)
