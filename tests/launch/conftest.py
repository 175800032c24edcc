"""What the verl trainer tests share: the session's toy folder (``tests/conftest.py`` ``TOY_ENV``), so each env's
rows and warm-started policy are built once for the hf and the vLLM rollout's runs alike, on both xdist workers
(a warm start is most of a run's time), and a Ray instance per test file, which its runs join."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ragym.rl.verl_plugin.verl_local import NO_PRESTART, PRIVATE_NETWORK, private_network_refusal
from tests.conftest import TOY_ENV

HEAD_PORT = 6390
"""The Ray head's port, on the loopback of its own network namespace (so each worker's may use the same)."""
HEAD_ARGS = "--head --block --node-ip-address 127.0.0.1 --num-cpus 16 --num-gpus 2 --include-dashboard false"
"""``ray start``'s arguments but the port and folder: on loopback, and in the foreground, so it dies with its namespace."""
HEAD_START_S = 300
"""Longest wait for ``ray start`` (a hang guard: about 10 s on 2 idle cores)."""


@pytest.fixture(scope="session")
def toy() -> Path:
    """The session's toy folder (``ragym train --engine verl --toy``), inside a private network namespace."""
    refusal = private_network_refusal()
    if refusal:
        pytest.skip(refusal)
    return Path(os.environ[TOY_ENV])


@dataclass(frozen=True)
class RayHead:
    """A Ray instance in a private network namespace (loopback only) that verl runs join instead of each starting
    and stopping one of their own (about 20 s of CPU a run on 2 cores: GCS, raylet, agents, prestarted workers)."""

    pid: int
    """A process inside the namespace (``unshare``'s), whose ``/proc/PID/ns/net`` a run enters."""

    def command(self, command: list[str]) -> list[str]:
        """``command`` inside the head's network namespace: it reaches the head, and listens on loopback only."""
        return ["nsenter", f"--net=/proc/{self.pid}/ns/net", *command]

    @property
    def env(self) -> dict[str, str]:
        """What a run joining the head adds to its environment."""
        return {"RAY_ADDRESS": f"127.0.0.1:{HEAD_PORT}"}


@pytest.fixture(scope="module")
def ray_head(toy: Path) -> Iterator[RayHead]:
    """A Ray instance for a test file's verl runs whose workers need nothing from the run's own environment (a Ray
    worker inherits the raylet's: a run that sets ``PYTHONPATH`` or a planted fault starts its own Ray). One per
    file, not per session: a running instance's own processes cost CPU while they live (about 20 s in 8 min).
    Logical CPUs and GPUs as ``recipes/platforms/cpu.yaml`` and ``cpu_separate_async.yaml`` give a Ray the
    trainer starts itself (16 and, for separate_async's rollout, 2)."""
    folder = Path(tempfile.mkdtemp(prefix="ragym-ray-"))  # short: Ray's socket paths stay under 107 bytes
    ray = str(Path(sys.executable).parent / "ray")
    start = [ray, "start", *HEAD_ARGS.split(), "--port", str(HEAD_PORT), "--temp-dir", str(folder / "ray")]
    env = {
        **os.environ,
        **NO_PRESTART,
        "PYTHONUNBUFFERED": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    log = folder / "head.log"
    with log.open("w") as out:
        head = subprocess.Popen(
            [*PRIVATE_NETWORK, "sh", "-c", 'ip link set lo up && exec "$@"', "ragym-test-ray", *start],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + HEAD_START_S
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None and time.monotonic() < deadline, (
                f"ray start failed:\n{log.read_text()[-4000:]}"
            )
            time.sleep(1)
        links = subprocess.run(
            RayHead(head.pid).command(["ip", "-o", "link"]), capture_output=True, text=True
        )
        # The runs that join it listen where it does: on loopback only.
        assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"], links.stdout
        yield RayHead(head.pid)
    finally:
        # unshare ignores SIGTERM; killed, it kills its child, the PID namespace's first process, and so all the rest.
        head.kill()
        head.wait(timeout=60)
        shutil.rmtree(folder, ignore_errors=True)
