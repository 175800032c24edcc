"""Every way an index is loaded searches with the same faiss settings, and each search's OpenMP threads are
chosen so that concurrent searches stay within the cores (ragym.envs.retrieval.search_settings)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import faiss
import numpy as np
import pytest

from ragym.envs.retrieval import search_settings
from ragym.envs.retrieval.retrievers import FaissRetriever
from ragym.envs.retrieval.search_settings import BLAS_THRESHOLD, plan_threads

FAISS_DEFAULT = 128_000
"""faiss 1.15's own BLAS threshold: what an index read from disk searches with unless a loader sets ours."""


def _vectors(num: int = 40, dim: int = 8) -> np.ndarray:
    rng = np.random.default_rng(0)
    out = rng.standard_normal((num, dim)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _fresh(tmp_path: Path, tiny_kb: Path) -> object:
    return FaissRetriever.from_vectors(_vectors(), [f"d{i}" for i in range(40)])


def _kb_recorded(tmp_path: Path, tiny_kb: Path) -> object:
    from ragym.envs.kbvqa.kb import load_kb

    shutil.copytree(tiny_kb, tmp_path / "kb")  # a path of its own: load_kb caches by path
    kb = load_kb(tmp_path / "kb")
    assert kb.manifest["index"]["entities"]["kind"] == "exact"
    return kb.image_retriever()


def _shard_manifest(tmp_path: Path, tiny_kb: Path) -> object:
    from ragym.envs.retrieval.service.shards import split_into_shards
    from ragym.envs.serving.catalog import CatalogSpec, load_catalog

    manifest = split_into_shards(_vectors(), [f"d{i}" for i in range(40)], 2, tmp_path / "shards")
    return load_catalog(CatalogSpec(shard_sets=(("vec", str(manifest)),)))["vec"]


def _encoding_index(tmp_path: Path, tiny_kb: Path) -> object:
    from ragym.data_prep.encoding.index import VectorBlocks, index_vectors, load_sharded_index

    index_vectors(VectorBlocks.from_array([f"d{i}" for i in range(40)], _vectors()), tmp_path / "idx")
    faiss.cvar.distance_compute_blas_threshold = FAISS_DEFAULT  # building set it; loading must set it again
    return load_sharded_index(tmp_path / "idx")


def _memora_export(tmp_path: Path, tiny_kb: Path) -> object:
    from sentence_transformers import SentenceTransformer

    from ragym.data_prep.encoding.tiny import build_tiny_text_encoder
    from ragym.rl.retriever.export import export_retriever, load_dense_retriever

    model = SentenceTransformer(str(build_tiny_text_encoder(tmp_path / "tiny", hidden=32, layers=1)))
    export_retriever(model, {f"d{i}": f"document {i} on topic {i % 3}" for i in range(10)}, tmp_path / "ex")
    faiss.cvar.distance_compute_blas_threshold = FAISS_DEFAULT
    return load_dense_retriever(tmp_path / "ex")


@pytest.mark.parametrize(
    "load",
    [_fresh, _kb_recorded, _shard_manifest, _encoding_index, _memora_export],
    ids=["fresh", "kb_recorded", "shard_manifest", "encoding_index", "memora_export"],
)
def test_every_load_path_sets_the_blas_threshold(
    load: Callable[[Path, Path], object], tmp_path: Path, tiny_kb: Path
) -> None:
    faiss.cvar.distance_compute_blas_threshold = FAISS_DEFAULT
    load(tmp_path, tiny_kb)
    assert faiss.cvar.distance_compute_blas_threshold == BLAS_THRESHOLD


@pytest.mark.parametrize(
    ("concurrent", "threads", "cores", "policy", "expected"),
    [
        (4, 0, 2, "default", 1),  # spinning threads: one per search, whatever the cores
        (1, 0, 16, "active", 1),
        (4, 0, 16, "passive", 4),  # sleeping threads: 16 cores shared by 4 searches
        (3, 0, 16, "passive", 5),  # 3 x 5 = 15 <= 16
        (4, 0, 2, "passive", 1),  # never below one
        (4, 3, 2, "default", 3),  # set by the user: kept
    ],
)
def test_threads_per_search_times_concurrent_searches_fit_the_cores(
    concurrent: int, threads: int, cores: int, policy: str, expected: int
) -> None:
    plan = plan_threads(concurrent, threads, cores, policy)
    assert plan.threads == expected
    if not threads:
        assert plan.threads * concurrent <= cores or plan.threads == 1
    assert f"{expected} per search x {concurrent} concurrent searches on {cores} cores" in plan.describe()


def test_a_bad_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="concurrent must be >= 1"):
        plan_threads(0)


def test_available_cores_follow_affinity_and_the_cgroup_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_settings.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(search_settings, "CPU_QUOTA", quota)
    assert search_settings.available_cores() == 6  # no quota file
    quota.write_text("max 100000\n")
    assert search_settings.available_cores() == 6
    quota.write_text("250000 100000\n")  # 2.5 CPUs
    assert search_settings.available_cores() == 2


def test_in_process_searches_take_one_thread_each_from_any_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_settings, "_THREADS", None)
    monkeypatch.delenv(search_settings.THREADS_ENV, raising=False)
    retriever = FaissRetriever.from_vectors(_vectors(), [f"d{i}" for i in range(40)])

    def search_and_report(_: int) -> int:
        faiss.omp_set_num_threads(8)  # what the worker thread had before: OpenMP's default of one per core
        retriever.batch_search(list(_vectors(24)), 5)
        return faiss.omp_get_max_threads()

    with ThreadPoolExecutor(6) as pool:  # env workers searching at once
        assert set(pool.map(search_and_report, range(12))) == {1}


def test_in_process_threads_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_settings, "_THREADS", None)
    monkeypatch.setenv(search_settings.THREADS_ENV, "3")
    retriever = FaissRetriever.from_vectors(_vectors(), [f"d{i}" for i in range(40)])
    retriever.search(_vectors(1)[0], 3)
    assert faiss.omp_get_max_threads() == 3
    monkeypatch.setattr(search_settings, "_THREADS", None)
    monkeypatch.setenv(search_settings.THREADS_ENV, "many")
    with pytest.raises(ValueError, match="RAGYM_SEARCH_THREADS"):
        retriever.search(_vectors(1)[0], 3)


def test_the_wait_policy_is_set_only_before_faiss_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(search_settings.WAIT_POLICY_ENV, raising=False)
    assert search_settings.request_wait_policy("passive") == "default"  # faiss is loaded in this process
    assert search_settings.WAIT_POLICY_ENV not in search_settings.os.environ
    code = (
        "import os, sys; from ragym.envs.retrieval.search_settings import request_wait_policy as r; "
        "p = r('passive'); import faiss; print(p, os.environ['OMP_WAIT_POLICY'])"
    )
    env = {k: v for k, v in search_settings.os.environ.items() if k != search_settings.WAIT_POLICY_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["passive", "PASSIVE"]
    with pytest.raises(ValueError, match="unknown OpenMP wait policy"):
        search_settings.request_wait_policy("lazy")


def test_a_user_wait_policy_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(search_settings.WAIT_POLICY_ENV, "active")
    assert search_settings.request_wait_policy("passive") == "active"
    assert search_settings.os.environ[search_settings.WAIT_POLICY_ENV] == "active"


def test_query_encoding_on_cpu_runs_with_the_search_threads_and_restores_torch(monkeypatch) -> None:
    """DocMemo's in-process query encoder: one torch thread per call (``$RAGYM_SEARCH_THREADS``), in the calling
    thread only, torch's own count back afterwards; concurrent callers each keep theirs; a GPU is untouched."""
    import torch

    from ragym.envs.retrieval import search_settings
    from ragym.envs.retrieval.page_encoders import cpu_encode_threads

    monkeypatch.setattr(search_settings, "_THREADS", None)
    monkeypatch.setenv("RAGYM_SEARCH_THREADS", "1")
    original = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _check_encode_threads(monkeypatch, search_settings, cpu_encode_threads)
    finally:
        torch.set_num_threads(original)


def _check_encode_threads(monkeypatch, search_settings, cpu_encode_threads) -> None:
    import threading

    import torch

    seen: list[int] = []
    inside = threading.Barrier(3, timeout=30)

    def encode() -> None:
        with cpu_encode_threads("cpu"):
            inside.wait()  # three callers inside at once
            seen.append(torch.get_num_threads())
            inside.wait()

    threads = [threading.Thread(target=encode) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [1, 1, 1]
    assert torch.get_num_threads() == 2
    with cpu_encode_threads("cuda:0"):
        assert torch.get_num_threads() == 2
    monkeypatch.setenv("RAGYM_SEARCH_THREADS", "2")
    monkeypatch.setattr(search_settings, "_THREADS", None)
    torch.set_num_threads(1)
    with cpu_encode_threads("cpu"):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize(
    ("threads", "env", "expected", "reason"),
    [
        (0, None, 1, "one per process"),  # whatever the cores and the wait policy
        (0, "3", 3, "$OMP_NUM_THREADS"),  # the user's (or Ray's, in its workers)
        (0, "4,2", 4, "$OMP_NUM_THREADS"),  # nested levels: the outer one
        (0, "0", 1, "one per process"),
        (0, "many", 1, "one per process"),
        (2, "3", 2, "set"),  # a recipe's ragym.engine.num_threads wins
    ],
)
def test_torch_gets_one_thread_per_process_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, threads: int, env: str | None, expected: int, reason: str
) -> None:
    if env is None:
        monkeypatch.delenv(search_settings.NUM_THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(search_settings.NUM_THREADS_ENV, env)
    for policy in ("passive", "default"):
        plan = search_settings.plan_torch_threads(threads, cores=16, policy=policy)
        assert (plan.threads, plan.cores, plan.wait_policy) == (expected, 16, policy)
        assert plan.reason.startswith(reason)
    with pytest.raises(ValueError, match="must be >= 0"):
        search_settings.plan_torch_threads(-1)


def test_torch_threads_apply_to_the_process_and_to_threads_it_starts_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    import torch

    monkeypatch.delenv(search_settings.NUM_THREADS_ENV, raising=False)
    original = torch.get_num_threads()
    torch.set_num_threads(2)
    seen: list[int] = []
    try:
        assert search_settings.use_torch_threads().threads == 1
        worker = threading.Thread(
            target=lambda: seen.append(torch.get_num_threads())
        )  # an env worker, a server
        worker.start()
        worker.join()
        assert torch.get_num_threads() == 1 and seen == [1]
        assert search_settings.use_torch_threads(3).threads == 3 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(original)


def test_the_wait_policy_is_not_requested_once_torch_has_loaded() -> None:
    """torch brings its own OpenMP runtime: asking afterwards would leave faiss's sleeping and torch's spinning."""
    code = (
        "import os, torch; from ragym.envs.retrieval.search_settings import request_wait_policy as r; "
        "print(r('passive'), os.environ.get('OMP_WAIT_POLICY', 'unset'))"
    )
    env = {k: v for k, v in search_settings.os.environ.items() if k != search_settings.WAIT_POLICY_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["default", "unset"]
