"""The retrieval service's configuration: batching, caching, auth, bind address."""

from __future__ import annotations

from dataclasses import dataclass

from ragym.envs.retrieval.search_settings import WAIT_POLICIES, ThreadPlan, plan_threads

DEFAULT_HOST = "127.0.0.1"
"""Never listen beyond the machine unless told to."""


@dataclass(frozen=True)
class ServiceConfig:
    """How the service batches, caches and guards its retrievers."""

    max_batch_size: int = 64
    """Most queries coalesced into one index call (per retriever and k)."""
    max_wait_ms: float = 2.0
    """Longest a query waits for others to join its batch once the index is free; bounds the added latency."""
    cache_size: int = 100_000
    """Entries of the replay cache (retriever, normalised query, k) -> hits; 0 turns it off."""
    token: str | None = None
    """Bearer token every search and readiness request must carry; None serves without auth."""
    host: str = DEFAULT_HOST
    """Address to bind (``ragym serve``); 127.0.0.1 unless told otherwise."""
    port: int = 8765
    """Port to bind (``ragym serve``)."""
    max_k: int = 1000
    """Largest k a request may ask for (bigger is a 422)."""
    max_queries_per_request: int = 1024
    """Largest batch_search request (bigger is a 413)."""
    max_body_bytes: int = 64 << 20
    """Largest request body kept (bigger is a 413, its bytes read and dropped): a full batch of 4096-d vector queries
    is about 22 MB."""
    search_workers: int = 4
    """Index calls that may run at once (the threads that run them; one call per retriever at a time)."""
    search_threads: int = 0
    """OpenMP threads per index call; 0 chooses (``ragym.envs.retrieval.search_settings.plan_threads``): one, or with the
    passive wait policy the cores shared out among ``search_workers``."""
    batch_splits: int = 1
    """Chunks a full batch is split into and searched at once (each chunk >= 24 queries): 1 keeps one index call
    per batch, best beside a busy co-tenant (a chunk stalled behind it stalls the whole batch); on a node the
    service has to itself, one per core nearly doubled the 2-core KB figure (``benchmarks/retrieval_service.py``)."""
    cpu_cores: int = 0
    """Cores the service may use; 0: those this process may run on (CPU affinity, cgroup CPU quota)."""
    gc_freeze: bool = True
    """Once the indexes are loaded, move every object then alive into the garbage collector's permanent generation
    (``gc.freeze``), so full collections stop walking the KB's lookup tables: on the 100k-entity KB under load they
    ran about once a second and took up to 77 ms each (5% of the time, every request in flight stalled)."""
    omp_wait_policy: str = "passive"
    """OpenMP wait policy ``ragym serve`` sets before faiss loads: ``passive`` (idle search threads sleep, so
    a busy node does not stall them), ``active`` or ``default``; one named in ``$OMP_WAIT_POLICY`` wins."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        if self.cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {self.cache_size}")
        if self.token is not None and not self.token:
            raise ValueError("token must be a non-empty string or None")
        if self.batch_splits < 1:
            raise ValueError(f"batch_splits must be >= 1, got {self.batch_splits}")
        if self.search_workers < 1 or self.search_threads < 0 or self.cpu_cores < 0:
            raise ValueError(
                f"search_workers must be >= 1, search_threads and cpu_cores >= 0; got "
                f"{self.search_workers}, {self.search_threads}, {self.cpu_cores}"
            )
        if self.omp_wait_policy not in WAIT_POLICIES:
            raise ValueError(f"omp_wait_policy must be one of {WAIT_POLICIES}, got {self.omp_wait_policy!r}")

    def thread_plan(self) -> ThreadPlan:
        """The OpenMP threads each index call gets, for the wait policy in effect in this process."""
        return plan_threads(self.search_workers, self.search_threads, self.cpu_cores)
