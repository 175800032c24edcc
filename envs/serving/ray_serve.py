"""The retrieval service as a Ray Serve application: N replicas of the app, and one deployment per shard.

    python -m ragym.envs.serving.ray_serve --kb-dir DIR [--replicas 4] [--shards NAME=shards.json
        --shard-replicas 2] [--gpus-per-replica 1] [--port 8000] [--swap-wait-s 60] [--encoder-poll-s 0.5]

connects to the running cluster (``ray start`` first, or inside a Ray job), deploys the app detached and
returns. Ray Serve runs an HTTP proxy on every node, bound to ``--host`` (127.0.0.1 by default), so each
agent-loop worker reaches the service at ``http://127.0.0.1:PORT`` on its own node and the proxy spreads
requests over the replicas. Each replica is the same ``RetrievalApp`` as ``ragym serve`` (its own
batcher and cache). A shard set too big for one replica becomes one deployment per shard (each with
``--shard-replicas`` replicas); the app's retriever for it sends every batch to all shards and merges
the hits by score (``ragym.envs.retrieval.service.shards.merge_hits``). ``POST /encoder`` reaches one replica
and swaps every one (``ragym.envs.serving.encoder_sync``; ``--swap-wait-s``, ``--encoder-poll-s``).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.search_settings import WAIT_POLICY_ENV
from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.service.shards import ShardSpec, load_shard, merge_hits, read_manifest
from ragym.envs.serving.catalog import CatalogSpec, load_catalog
from ragym.envs.serving.encoder_sync import SyncSettings, serve_replica_sync

if TYPE_CHECKING:
    from ray.serve.deployment import Deployment as ServeDeployment

APP_NAME = "ragym-retrieval"
"""Name of the Serve application (``serve status``, ``serve shutdown``)."""


@dataclass(frozen=True)
class Deployment:
    """How many replicas, on which resources."""

    replicas: int = 1
    """Replicas of the app (each loads the whole catalog)."""
    cpus_per_replica: float = 1.0
    """CPUs Ray reserves per replica."""
    gpus_per_replica: float = 0.0
    """GPUs per replica; flat indexes move to the replica's GPU when > 0 (``shards.to_gpu``)."""
    shard_replicas: int = 1
    """Replicas of each shard deployment."""
    encoder_sync: SyncSettings = field(default_factory=SyncSettings)
    """How an encoder swap spreads over the replicas (how long it waits for them, how often they poll)."""


class ShardFanout:
    """A vector retriever whose shards are Serve deployments: one call per shard per batch, merged by score."""

    def __init__(self, handles: Sequence[Any], dim: int):
        self.handles, self.dim = list(handles), dim

    def batch_search(self, queries: list[np.ndarray], k: int) -> list[list[Hit]]:
        """Every shard answers the batch (in parallel); each query keeps the k best hits."""
        batch = np.stack(queries).astype(np.float32)  # (num_queries, dim)
        responses = [h.search.remote(batch, k) for h in self.handles]  # runs in the app's search thread
        per_shard = [[[Hit(d, s) for d, s in hits] for hits in r.result()] for r in responses]
        return [merge_hits([shard[i] for shard in per_shard], k) for i in range(len(queries))]


class ShardReplica:
    """One shard of an index (``ShardSpec``) behind a Serve deployment."""

    def __init__(self, spec: ShardSpec, gpu: bool):
        self.retriever = load_shard(spec, 0 if gpu else None)

    def search(self, batch: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """(docid, score) lists for each row of ``batch``, best first."""
        return [[(h.docid, h.score) for h in hits] for hits in self.retriever.batch_search(list(batch), k)]


class RetrievalReplica:
    """One replica of the app: loads the catalog, wraps sharded retrievers around their deployments."""

    def __init__(
        self,
        catalog: CatalogSpec | None,
        config: ServiceConfig,
        shards: dict[str, tuple[int, list[Any]]],
        encoder_sync: SyncSettings,
    ):
        served = load_catalog(catalog) if catalog is not None else {}
        for name, (dim, handles) in shards.items():
            served[name] = Served(ShardFanout(handles, dim), "vector", dim)
        self.sync = serve_replica_sync(served, config, encoder_sync)
        self.service = self.sync.app  # not ``app``: Serve's ASGI wrapper owns that name

    async def __serve_build_asgi_app__(self) -> RetrievalApp:
        """Runs before Serve routes a request here: a replica that starts after a swap serves the swapped version."""
        await self.service.loaded()
        await self.sync.adopt()
        self.sync.start()
        return self.service

    def check_health(self) -> None:
        """Serve restarts a replica whose retrievers failed to load."""
        if self.service.load_error:
            raise RuntimeError(self.service.load_error)


def replica_options(config: ServiceConfig, deployment: Deployment) -> tuple[dict[str, Any], ServiceConfig]:
    """Ray actor options of a replica (its CPUs, GPUs and the OpenMP wait policy, set before faiss loads in
    the replica's fresh process) and the config it runs: its cores are the CPUs Ray reserves for it."""
    options: dict[str, Any] = {
        "num_cpus": deployment.cpus_per_replica,
        "num_gpus": deployment.gpus_per_replica,
    }
    if config.omp_wait_policy != "default":
        options["runtime_env"] = {"env_vars": {WAIT_POLICY_ENV: config.omp_wait_policy.upper()}}
    cores = config.cpu_cores or max(1, int(deployment.cpus_per_replica))
    return options, replace(config, cpu_cores=cores)


def build_app(catalog: CatalogSpec, config: ServiceConfig, deployment: Deployment) -> Any:
    """The Serve application: shard deployments first, then the app replicas holding their handles."""
    from ray import serve

    gpu = deployment.gpus_per_replica > 0
    resources, config = replica_options(config, deployment)
    # serve.deployment(cls) is a Deployment; ray's PublicAPI decorator hides that overload from static tools.
    shard_wrapper = cast("ServeDeployment", serve.deployment(ShardReplica))
    shards = {}
    for name, manifest in catalog.shard_sets:
        dim, specs = read_manifest(manifest)
        bound = [
            shard_wrapper.options(
                name=f"{name}-shard-{i}", num_replicas=deployment.shard_replicas, ray_actor_options=resources
            ).bind(spec, gpu)
            for i, spec in enumerate(specs)
        ]
        shards[name] = (dim, bound)
    local = replace(catalog, shard_sets=(), gpu=0 if gpu else None) if catalog.folders else None
    ingress = cast("ServeDeployment", serve.deployment(serve.ingress()(RetrievalReplica)))
    return ingress.options(
        name="retrieval", num_replicas=deployment.replicas, ray_actor_options=resources
    ).bind(local, config, shards, deployment.encoder_sync)


def deploy(catalog: CatalogSpec, config: ServiceConfig, deployment: Deployment, host: str, port: int) -> str:
    """Deploy (or update) the app on the connected cluster, detached; returns the local proxy URL."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address="auto", logging_level=logging.ERROR)
    serve.start(http_options={"host": host, "port": port, "location": "EveryNode"})
    serve.run(build_app(catalog, config, deployment), name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> int:
    """Deploy from the command line (the ``ragym serve`` flags plus replicas and resources)."""
    from ragym.envs.serving.cli import parse_args, service_config

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--shard-replicas", type=int, default=1)
    parser.add_argument("--cpus-per-replica", type=float, default=1.0)
    parser.add_argument("--gpus-per-replica", type=float, default=0.0)
    parser.add_argument(
        "--swap-wait-s",
        type=float,
        default=SyncSettings.wait_s,
        help="how long POST /encoder waits for every replica to hold the new version (then 504)",
    )
    parser.add_argument(
        "--encoder-poll-s",
        type=float,
        default=SyncSettings.poll_s,
        help="how often each replica asks for an encoder version it does not hold",
    )
    extra, rest = parser.parse_known_args(argv)
    args = parse_args(rest)
    if args.port == ServiceConfig().port and "--port" not in rest:
        args.port = 8000  # Serve's usual port
    catalog = CatalogSpec(args.folders, tuple(args.shards), args.index_kind, None)
    config = service_config(args)  # host and port go to Serve's proxy below, not to the app
    deployment = Deployment(
        extra.replicas,
        extra.cpus_per_replica,
        extra.gpus_per_replica,
        extra.shard_replicas,
        SyncSettings(extra.swap_wait_s, extra.encoder_poll_s),
    )
    url = deploy(catalog, config, deployment, args.host, args.port)
    print(f"ragym retrieval service deployed: {url} (on every node); export RAGYM_RETRIEVAL_URL={url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
