"""faiss search settings every loaded index gets, and the OpenMP threads each search (and torch) may use.

Neither setting is stored in an index file, so an index read from disk searches with faiss's defaults
unless the loader sets them; every loader in ragym (a fresh ``build_index``, a KB's recorded index, a shard
manifest, a MEMORA-R export) goes through ``FaissRetriever`` or calls ``apply_search_settings`` itself.

- BLAS threshold: faiss computes a flat scan with one BLAS matrix product from this many queries up, and
  with its own SIMD loop below. faiss 1.15's default (128,000) sends a batch of 64 down the loop, several
  times slower than BLAS; a single query stays on the loop, where BLAS's fixed cost would dominate.
- Threads: OpenMP threads of a team spin while they wait for each other (libgomp's default). When another
  process holds a core (rollout workers, envs, another search), a spinning team stalls, and a batch of 64
  ran twenty times slower with two threads than with one. So a search gets one thread unless the OpenMP
  wait policy is passive (idle threads sleep); then the cores are shared out among the searches that may
  run at once, so threads per search x concurrent searches never exceeds the cores this process is given.
- torch: the same spinning, and more. A team of OpenMP threads meets at a barrier after every parallel op,
  so when another process holds a core the whole team waits for the member that lost it, sleeping or not.
  Processes that train or run a policy (the local engine, the toy warm start, eval) therefore run torch with
  one intra-op thread unless told otherwise (``plan_torch_threads``); verl's Ray workers get one from Ray
  (``$OMP_NUM_THREADS`` = their CPUs, 1 for actors that reserve none). Every ``ragym`` command but
  ``serve`` (which has its own setting) asks for the passive wait policy before torch loads.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

# faiss is imported where it is used: ``ragym serve`` must set the OpenMP wait policy before faiss loads.
log = logging.getLogger(__name__)

BLAS_THRESHOLD = 20
"""Queries per call from which faiss scans a flat index with BLAS (``faiss.cvar.distance_compute_blas_threshold``)."""
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
"""Read by OpenMP once, when faiss's or torch's library loads (each its own); setting it later changes nothing."""
OPENMP_MODULES = ("faiss", "torch")
"""Modules that load an OpenMP runtime: the wait policy is only requested before any of them is imported."""
NUM_THREADS_ENV = "OMP_NUM_THREADS"
"""OpenMP's thread count: torch's when set (by the user, or by Ray for each worker: its CPUs, else 1)."""
THREADS_ENV = "RAGYM_SEARCH_THREADS"
"""OpenMP threads per in-process search; unset or 0 chooses (``plan_threads``)."""
CPU_QUOTA = Path("/sys/fs/cgroup/cpu.max")
"""cgroup v2 CPU quota of this container (``max`` or ``<quota> <period>``), when there is one."""
WAIT_POLICIES = ("passive", "active", "default")
"""``passive``: idle OpenMP threads sleep; ``active``: they spin; ``default``: leave OpenMP's own (spin a while)."""


def apply_search_settings() -> None:
    """Set the process-wide faiss settings every index is searched with (idempotent; call on every load)."""
    import faiss

    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota when one is set."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        limit, period = CPU_QUOTA.read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    if limit == "max":
        return cores
    return max(1, min(cores, int(limit) // int(period)))


def wait_policy() -> str:
    """The OpenMP wait policy this process's environment names (``default`` when unset)."""
    value = os.environ.get(WAIT_POLICY_ENV, "").strip().lower()
    return value if value in ("passive", "active") else "default"


def request_wait_policy(policy: str) -> str:
    """Set the OpenMP wait policy before faiss's or torch's OpenMP loads; returns the policy in effect.

    A policy the environment already names wins (the user set it); once either library is loaded nothing
    changes (it would leave one runtime spinning and the other not). Processes this one starts inherit it.
    """
    if policy not in WAIT_POLICIES:
        raise ValueError(f"unknown OpenMP wait policy {policy!r}; expected one of {WAIT_POLICIES}")
    loaded = any(module in sys.modules for module in OPENMP_MODULES)
    if policy != "default" and WAIT_POLICY_ENV not in os.environ and not loaded:
        os.environ[WAIT_POLICY_ENV] = policy.upper()
    return wait_policy()


@dataclass(frozen=True)
class ThreadPlan:
    """How many OpenMP threads each faiss search (or, ``plan_torch_threads``, a process's torch) uses, and why."""

    threads: int
    """OpenMP threads per index call."""
    concurrent: int
    """Index calls that may run at once in this process (1 in a torch plan)."""
    cores: int
    """Cores this process is given."""
    wait_policy: str
    """OpenMP wait policy in effect (``passive``, ``active``, ``default``)."""
    reason: str
    """Why ``threads`` was chosen."""

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"faiss search threads: {self.threads} per search x {self.concurrent} concurrent searches "
            f"on {self.cores} cores, OpenMP wait policy {self.wait_policy} ({self.reason})"
        )


def plan_threads(concurrent: int, threads: int = 0, cores: int = 0, policy: str | None = None) -> ThreadPlan:
    """Threads per search for ``concurrent`` searches at once: ``threads`` when given, else one per search
    unless idle threads sleep (passive policy), then the ``cores`` (0: ``available_cores``) shared out."""
    if concurrent < 1 or threads < 0 or cores < 0:
        raise ValueError(
            f"concurrent must be >= 1, threads and cores >= 0; got {concurrent}, {threads}, {cores}"
        )
    cores = cores or available_cores()
    policy = wait_policy() if policy is None else policy
    if threads:
        reason = "set"
    elif policy == "passive":
        threads, reason = max(1, cores // concurrent), "cores shared out among concurrent searches"
    else:
        threads, reason = (
            1,
            "OpenMP threads spin while waiting: more than one per search stalls on a busy node",
        )
    return ThreadPlan(threads, concurrent, cores, policy, reason)


_THREADS: int | None = None
_LOCAL = threading.local()


def set_search_threads(threads: int, this_thread: bool = False) -> None:
    """Threads every faiss search of this process (or, with ``this_thread``, of the calling thread) uses."""
    global _THREADS
    if threads < 1:
        raise ValueError(f"search threads must be >= 1, got {threads}")
    if this_thread:
        _LOCAL.threads = threads
    else:
        _THREADS = threads


def search_threads() -> int:
    """Threads per faiss search in the calling thread: as set for it (the service's search threads), else for
    the process, else ``$RAGYM_SEARCH_THREADS``, else one (env workers search at once in numbers this process
    does not know, and one thread per search never oversubscribes the cores)."""
    local = getattr(_LOCAL, "threads", None)
    if local is not None:
        return local
    if _THREADS is None:
        text = os.environ.get(THREADS_ENV, "").strip() or "0"
        if not text.isdigit():
            raise ValueError(f"${THREADS_ENV} must be a whole number of threads, got {text!r}")
        threads = int(text) or 1
        set_search_threads(threads)
        return threads
    return _THREADS


def use_search_threads() -> int:
    """Give the calling thread's next faiss calls ``search_threads()`` OpenMP threads (a per-thread setting)."""
    import faiss

    threads = search_threads()
    faiss.omp_set_num_threads(threads)
    return threads


def plan_torch_threads(threads: int = 0, cores: int = 0, policy: str | None = None) -> ThreadPlan:
    """torch intra-op threads for a process that trains or runs a policy on CPU: ``threads`` when given, else
    ``$OMP_NUM_THREADS`` when set, else one, whatever the wait policy (a sleeping team still waits at each
    barrier for the member another process holds up; ``benchmarks/training_threads.py`` measures it)."""
    if threads < 0 or cores < 0:
        raise ValueError(f"threads and cores must be >= 0; got {threads}, {cores}")
    cores = cores or available_cores()
    policy = wait_policy() if policy is None else policy
    text = os.environ.get(NUM_THREADS_ENV, "").split(",")[0].strip()
    if threads:
        reason = "set"
    elif text.isdigit() and int(text) > 0:
        threads, reason = int(text), f"${NUM_THREADS_ENV}"
    else:
        threads, reason = 1, "one per process: a team of threads stalls when another process holds a core"
    return ThreadPlan(threads, 1, cores, policy, reason)


def use_torch_threads(threads: int = 0) -> ThreadPlan:
    """Give this process's torch ``plan_torch_threads(threads)`` intra-op threads (threads it starts later too)."""
    import torch

    plan = plan_torch_threads(threads)
    torch.set_num_threads(plan.threads)
    log.info(
        "torch threads: %d on %d cores, OpenMP wait policy %s (%s)",
        plan.threads,
        plan.cores,
        plan.wait_policy,
        plan.reason,
    )
    return plan
