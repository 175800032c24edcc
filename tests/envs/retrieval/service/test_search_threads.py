"""The service's faiss threading: flags and config fields, the plan its search threads run with, the
OpenMP wait policy ``ragym serve`` sets before faiss loads, and the choice logged at start."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.retrievers import FaissRetriever
from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.service.shards import split_into_shards
from ragym.envs.serving.cli import parse_args, service_config
from ragym.envs.serving.ray_serve import Deployment, replica_options

REPO = Path(__file__).resolve().parents[4]


class ThreadReporting:
    """A faiss retriever that records the OpenMP threads each of its searches ran with."""

    def __init__(self, inner: FaissRetriever):
        self.inner, self.threads = inner, []

    def batch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        faiss.omp_set_num_threads(8)  # a stale setting in the thread: the search must replace it
        hits = self.inner.batch_search(queries, k)
        self.threads.append(faiss.omp_get_max_threads())
        return hits


def _vectors(num: int, dim: int = 8) -> np.ndarray:
    out = np.random.default_rng(0).standard_normal((num, dim)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_the_flags_become_service_config_fields() -> None:
    args = parse_args(
        [
            "--kb-dir",
            "kb",
            "--search-workers",
            "2",
            "--search-threads",
            "3",
            "--cpu-cores",
            "6",
            "--omp-wait-policy",
            "active",
            "--batch-splits",
            "2",
        ]
    )
    config = service_config(args)
    assert (
        config.search_workers,
        config.search_threads,
        config.cpu_cores,
        config.omp_wait_policy,
        config.batch_splits,
    ) == (2, 3, 6, "active", 2)
    defaults = service_config(parse_args(["--kb-dir", "kb"]))
    assert (defaults.search_workers, defaults.search_threads, defaults.cpu_cores, defaults.batch_splits) == (
        4,
        0,
        0,
        1,
    )
    assert defaults.omp_wait_policy == "passive" and defaults.gc_freeze
    assert not service_config(parse_args(["--kb-dir", "kb", "--no-gc-freeze"])).gc_freeze
    with pytest.raises(SystemExit):
        parse_args(["--kb-dir", "kb", "--omp-wait-policy", "lazy"])


@pytest.mark.parametrize(
    "fields",
    [{"search_workers": 0}, {"search_threads": -1}, {"cpu_cores": -2}, {"omp_wait_policy": "lazy"}],
)
def test_bad_threading_fields_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ServiceConfig(**fields)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (ServiceConfig(search_threads=3), 3),
        (ServiceConfig(cpu_cores=8, search_workers=2), None),  # chosen: depends on this process's policy
    ],
)
def test_service_searches_run_with_the_planned_threads(config: ServiceConfig, expected: int | None) -> None:
    retriever = ThreadReporting(FaissRetriever.from_vectors(_vectors(30), [f"d{i}" for i in range(30)]))
    app = RetrievalApp({"vec": Served(retriever, "vector", 8)}, config)
    plan = app.thread_plan
    assert plan.threads == (expected or config.thread_plan().threads)
    if plan.wait_policy != "passive" and not config.search_threads:
        assert plan.threads == 1
    before = faiss.omp_get_max_threads()

    async def search() -> list:
        await app.start()
        try:
            return await app.search("vec", list(_vectors(5)), 3)
        finally:
            for batcher in app.batchers.values():
                batcher.close()

    assert len(asyncio.run(search())) == 5
    assert retriever.threads == [plan.threads]
    assert app.status()["search_threads"]["threads"] == plan.threads
    assert faiss.omp_get_max_threads() == before  # the plan is the service threads', not this thread's


def test_ragym_serve_sets_the_wait_policy_before_faiss_and_logs_its_choice(tmp_path: Path) -> None:
    manifest = split_into_shards(_vectors(20), [f"d{i}" for i in range(20)], 1, tmp_path)
    code = (
        "import sys, uvicorn; uvicorn.run = lambda *a, **k: None; from ragym.envs.serving.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    argv = ["--shards", f"vec={manifest}", "--cpu-cores", "8", "--search-workers", "2"]
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    line = "faiss search threads: 4 per search x 2 concurrent searches on 8 cores, OpenMP wait policy passive"
    assert line in out.stderr
    active = subprocess.run(
        [sys.executable, "-c", code, *argv, "--omp-wait-policy", "default"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1 per search x 2 concurrent searches on 8 cores, OpenMP wait policy default" in active.stderr


def test_ray_replicas_get_the_wait_policy_and_their_reserved_cpus() -> None:
    options, config = replica_options(ServiceConfig(), Deployment(cpus_per_replica=6))
    assert options["runtime_env"] == {"env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}}
    assert options["num_cpus"] == 6 and config.cpu_cores == 6
    options, config = replica_options(ServiceConfig(omp_wait_policy="default", cpu_cores=3), Deployment())
    assert "runtime_env" not in options and config.cpu_cores == 3
