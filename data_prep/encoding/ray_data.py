"""The encoding step on a Ray cluster: the same per-shard code as Ray Data actors, one GPU each.

Each pending shard becomes one row of a Ray dataset; ``map_batches`` hands rows to a pool of
``ShardActor``s, each of which builds the encoder from its ``EncoderSpec`` once and runs
``pipeline.run_shards`` (the local code path, prefetch thread included) on its shard, writing the shard
file itself. Shards are cut and batched exactly as locally, so the files are the same; the output folder
must be on storage every node writes (a shared filesystem).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ragym.data_prep.encoding.encoders import EncoderSpec, build_encoder
from ragym.data_prep.encoding.items import Item
from ragym.data_prep.encoding.worker import EncodeConfig, run_shards

log = logging.getLogger(__name__)


class ShardActor:
    """A Ray Data actor: one encoder (on one GPU where the cluster has them) encoding whole shards."""

    def __init__(self, spec: dict[str, Any], root: str, config: dict[str, Any]) -> None:
        self.encoder = build_encoder(EncoderSpec.from_dict(spec))
        self.root = Path(root)
        self.config = EncodeConfig(**{**config, "progress": False})

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Encode and write each shard of the batch; returns (shard, count) per shard."""
        work = [
            (int(index), [Item.from_json(line) for line in str(text).splitlines()])
            for index, text in zip(batch["shard"], batch["items"], strict=True)
        ]
        done = list(run_shards(work, self.encoder, self.root, self.config))
        return {"shard": np.array([d[0] for d in done]), "count": np.array([d[1] for d in done])}


def _connect(address: str) -> bool:
    """Join the cluster at ``address`` unless this process already has; True when we joined (and must leave)."""
    import ray

    from ragym import data_prep, envs

    if ray.is_initialized():
        return False
    # Ship ragym's own packages to the workers; third-party libraries come from the cluster's image.
    ray.init(address=address, runtime_env={"py_modules": [data_prep, envs]}, log_to_driver=False)
    return True


def run_on_ray(
    work: Iterable[tuple[int, list[Item]]],
    spec: EncoderSpec,
    root: Path,
    config: Any,
    bar: tqdm | None,
    address: str,
    num_actors: int | None = None,
    gpus_per_actor: float | None = None,
    cpus_per_actor: float = 1.0,
) -> None:
    """Encode the pending shards of ``work`` on the cluster at ``address``, one shard per actor call."""
    import ray
    import ray.data

    rows = [{"shard": i, "items": "\n".join(it.to_json() for it in items)} for i, items in work]
    if not rows:
        return
    joined = _connect(address)
    try:
        resources = ray.cluster_resources()
        if gpus_per_actor is None:
            gpus_per_actor = 1.0 if spec.device.startswith("cuda") else 0.0
        if num_actors is None:
            slots = resources.get("GPU", 0) / gpus_per_actor if gpus_per_actor else resources.get("CPU", 1)
            num_actors = max(1, min(len(rows), int(slots / (1 if gpus_per_actor else cpus_per_actor))))
        log.info(
            "encoding %d shards on %d Ray Data actors (%s GPU each)", len(rows), num_actors, gpus_per_actor
        )
        ray.data.DataContext.get_current().enable_progress_bars = False
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            ShardActor,
            fn_constructor_kwargs={"spec": spec.to_dict(), "root": str(root), "config": asdict(config)},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=num_actors),
            num_gpus=gpus_per_actor,
            num_cpus=cpus_per_actor,
        )
        for row in dataset.iter_rows():
            if bar is not None:
                bar.update(int(row["count"]))
    finally:
        if joined:
            ray.shutdown()
