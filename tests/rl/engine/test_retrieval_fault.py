"""Kill the retrieval service in the middle of a batch of rollouts, restart it: no episode hangs, every
episode ends with an answer and a recorded ``retrieval_error`` where a search failed, and the GRPO step
(advantages, loss, optimizer update) completes. Loopback only; every wait is bounded."""

from __future__ import annotations

import asyncio
import http.client
import math
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragym.envs.events import events_of
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.engine import trainer as trainer_module
from ragym.rl.train import build_trainer
from tests.envs.retrieval.service.helpers import free_port
from tests.rl.fakes import ScriptedServer

SCRIPT = [
    "<reason>look</reason><search_call>SearchImage(1)</search_call>",
    "<reason>not these</reason><rerank>Reject()</rerank>",
    "<reason>not these</reason><rerank>Reject()</rerank>",
    "<reason>enough</reason><answer>unknown</answer>",
]
KILL_AT_CALL, RESTART_AT_CALL = 10, 20
"""Generate calls (of 8 episodes x 4 turns) at which the service is killed, then started again."""


class _Stats:
    generate_s = 0.0


class FaultyServiceScript(ScriptedServer):
    """The scripted policy server, plus the local engine's episode hooks, plus the fault: on given calls it
    SIGKILLs or restarts the retrieval service process."""

    def __init__(self, tokenizer, service: Service):
        super().__init__(tokenizer, SCRIPT)
        self.service, self.stats, self.num_calls = service, _Stats(), 0

    def track_episodes(self, num_episodes: int) -> None:
        """The local engine announces its episodes (nothing to batch here)."""

    def episode_done(self) -> None:
        """An episode ended."""

    async def generate(self, request_id, **kwargs):
        self.num_calls += 1
        if self.num_calls == KILL_AT_CALL:
            self.service.kill()
        elif self.num_calls == RESTART_AT_CALL:
            self.service.start()  # returns at once; the service loads while episodes go on
        return await super().generate(request_id, **kwargs)


class Service:
    """``ragym serve`` in a child process on a fixed loopback port."""

    def __init__(self, kb: Path, port: int):
        self.command = [
            sys.executable,
            "-m",
            "ragym.envs.serving.cli",
            "--kb-dir",
            str(kb),
            "--port",
            str(port),
        ]
        self.port, self.process = port, None

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("retrieval service did not become ready")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.policy import build_tiny_policy

    root = tmp_path_factory.mktemp("fault")
    kb = build_kb(root / "kb", PRESETS["tiny"], seed=0)
    return kb, build_tiny_policy("qwen2_5_vl", root / "policy", seed=0), root


@pytest.mark.slow
def test_killing_the_service_mid_batch_ends_every_episode_and_the_step(setup, monkeypatch) -> None:
    kb, policy, root = setup
    service = Service(kb, free_port())
    monkeypatch.setenv("RAGYM_RETRIEVAL_URL", f"http://127.0.0.1:{service.port}")
    service.start()
    try:
        service.wait_ready()
        trainer = build_trainer(
            "kbvqa_tiny_cpu",
            [
                f"actor_rollout_ref.model.path={policy}",
                f"data.train_files={kb}/data/train.parquet",
                f"data.val_files={kb}/data/test.parquet",
                f"trainer.default_local_dir={root / 'out'}",
                "trainer.logger=[console]",
                "data.train_batch_size=2",
                "actor_rollout_ref.rollout.n=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "data.max_response_length=1024",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
            ],
        )
        server = FaultyServiceScript(trainer.tokenizer, service)
        trainer.server = server
        trainer.agent_loop = make_agent_loop(trainer.config, server, trainer.tokenizer, trainer.processor)
        episodes = []
        real_run = trainer_module.run_episodes

        def recording_run(*args, **kwargs):
            results, times = real_run(*args, **kwargs)
            episodes.extend(results)
            return results, times

        monkeypatch.setattr(trainer_module, "run_episodes", recording_run)
        outcome: dict = {}

        def step() -> None:
            asyncio.set_event_loop(trainer.loop)  # the engine's loop, now driven from this thread
            outcome.update(trainer.train_step())

        worker = threading.Thread(target=step, daemon=True)
        worker.start()
        worker.join(timeout=240)
        assert not worker.is_alive(), "the training step hung"
        service.wait_ready()  # the restarted service came back
    finally:
        service.stop()
    assert server.num_calls >= RESTART_AT_CALL and len(episodes) == 8
    events = [r.output.extra_fields["events"] for r in episodes]
    # Every episode ended: with its answer, or cut by a recorded budget (never left hanging).
    ends = [[x["type"] for x in e][-3:] for e in events]
    assert all(events_of(e, "answer") or events_of(e, "truncated") for e in events), ends
    assert sum(len(events_of(e, "search_image")) for e in events) > 0  # before the kill, searches worked
    errors = [x for e in events for x in events_of(e, "retrieval_error")]
    # Down: connection refused / timeouts / the open breaker; restarting: a 5xx until its indexes are loaded.
    assert errors and {x["reason"] for x in errors} <= {
        "connection",
        "circuit_open",
        "timeout",
        "server_error",
    }
    # The step went through the update: a finite policy loss, GRPO statistics, the step counter advanced.
    assert math.isfinite(outcome["actor/pg_loss"]) and "grpo/adv_std" in outcome and trainer.step == 1
