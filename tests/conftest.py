"""Shared pytest setup: offline hubs, deterministic seeds, paths to shared data."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from ragym.envs.retrieval.search_settings import request_wait_policy, use_torch_threads

# No hub is reachable here or in CI: fail fast instead of hanging on a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A retrieval service named by the developer's shell would reroute every KBVQA-v0 env under test.
os.environ.pop("RAGYM_RETRIEVAL_URL", None)
os.environ.pop("RAGYM_RETRIEVAL_TOKEN", None)
# Threads as the ragym commands choose them (docs/training.md#threads): idle OpenMP threads sleep (set before
# torch or faiss loads; the commands and Ray workers tests start inherit it) and torch computes with one thread
# ($OMP_NUM_THREADS when set). With torch's default of one spinning thread per core, tests slowed many-fold on a
# machine other jobs kept busy.
request_wait_policy("passive")
use_torch_threads()
# Workers of the Ray instances tests start (ray start, verl's trainer) at the tests' own priority: at Ray's default
# niceness (15) any busy process on the machine starved them (a toy verl run beside two took 21 min, not 4).
os.environ.setdefault("RAY_worker_niceness", "0")

VERL_GROUPS = {
    "tests/launch/test_verl_trainer.py": "verl-hf",
    "tests/launch/test_verl_lora_async.py": "verl-hf",
    "tests/launch/test_verl_async.py": "verl-hf",
    "tests/launch/test_verl_lora.py": "verl-vllm",
    "tests/launch/test_verl_vllm.py": "verl-vllm",
    "tests/launch/test_new_env_folder.py": "verl-vllm",
}
"""``make test``'s two workers (``pytest -n 2 --dist loadgroup``) each take one group of verl trainer runs first (the
two largest scopes) and then share the rest of the suite, test by test. The groups are balanced by measured CPU (a
2-step toy run on the hf rollout: about 160 s, a vLLM run more; ``tests/launch/budget.md``): the hf group's 6 runs
(3 async-mode runs on DocMemo and MEMORA, 2 async LoRA runs, the GPU smoke script on the legacy trainer) and 2-3 toy
builds, the other's 4 runs (sync LoRA, R3G and LoRA on vLLM, the new env's) beside 2 vLLM servers and 2-3 builds.
A verl run spends much of its wall time waiting on start-ups (worker processes, imports), so two overlap well on 2
cores. Both workers share one toy folder (``TOY_ENV``); a test file's runs join one Ray instance
(``tests/launch/conftest.py`` ``ray_head``). The groups are assigned here rather than by ``xdist_group`` marks,
which pytest-xdist 3.8 ignores under pytest 9 (it tags ``item._nodeid``, which pytest 9 no longer reads)."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` with the verl groups above; None (xdist's own choice) for any other ``--dist``."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class VerlGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = VERL_GROUPS.get(nodeid.split("::", 1)[0])
            return group if group is not None else super()._split_scope(nodeid)

    return VerlGroupScheduling(config, log)


TOY_ENV = "RAGYM_TEST_TOY"
"""The toy folder (``ragym train --engine verl --toy``) that every verl run of a test session shares, both xdist
workers included: each env's rows and warm-started policy are built once per session, not once per worker (a
warm start is 1-2 min of CPU), by whichever run asks first while the others of that env wait (``toy_overrides``'
lock, one per env)."""


def pytest_configure(config: pytest.Config) -> None:
    """The session's shared toy folder, named here before pytest-xdist starts its workers (they inherit it)."""
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        # Short, under /tmp: Ray's socket paths stay under 107 bytes.
        os.environ[TOY_ENV] = tempfile.mkdtemp(prefix="ragym-verl-")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The shared toy folder goes with the session that made it."""
    if not hasattr(config, "workerinput") and TOY_ENV in os.environ:
        shutil.rmtree(os.environ.pop(TOY_ENV), ignore_errors=True)


REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The shared real-data folder; tests using it skip with a reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA
