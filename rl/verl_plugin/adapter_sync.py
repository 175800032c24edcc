"""The ``adapter_sync`` run check fed from real weight syncs, in every trainer mode.

Where the hf rollout loads a sync that carries LoRA adapters, its server (``AdapterSyncLog``) fingerprints the
incoming adapters and its own before and after loading them (``ragym.rl.guards.adapter_digest``): whether the
trainer's adapters changed since the previous sync, whether the rollout's changed in this one. ragym's trainer
takes those records from every replica at each step (``rollout.take_adapter_syncs``, after verl's sync of that
step) and logs them as ``lora/sync_trained_changed`` and ``lora/sync_rollout_changed`` (``step_metrics``), which
the ``adapter_sync`` guard reads. One mechanism for ``sync``, ``colocate_async`` and ``separate_async``: every mode
syncs through the server's ``update_weights``.

ragym's CPU vLLM rollout (sync mode) loads adapters in vLLM's own worker processes, which no Ray actor of ragym's
reaches: its worker extension (``ragym.rl.verl_plugin.vllm_worker``) keeps the same log and leaves its records as
files in the folder ``RECORDS_VAR`` names (``leave_records``), which the trainer takes at each step
(``take_left_records``) beside the hf servers'.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ragym.rl.guards import (
    ADAPTERS_ROLLOUT_CHANGED,
    ADAPTERS_TRAINED_CHANGED,
    adapter_sync_metrics,
)


class AdapterSyncLog:
    """What one rollout server remembers of its adapter syncs: the last incoming adapters' digest, and the
    records not yet taken by the trainer."""

    def __init__(self) -> None:
        self.previous: str | None = None
        """Digest of the adapters the previous sync brought (None before the first)."""
        self.pending: list[dict[str, float]] = []
        """One record per adapter sync since the last ``take``: its step and ``adapter_sync_metrics``."""

    def record(self, step: int | None, trained: str, rollout: tuple[str, str]) -> None:
        """Record one adapter sync: the digest of the adapters it brought (``trained``) and of the rollout's own
        before and after loading them (``rollout``). The first sync is not judged: there is no previous one to say
        whether the trainer's adapters changed."""
        if self.previous is not None:
            self.pending.append(
                {"step": float(step or 0), **adapter_sync_metrics((self.previous, trained), rollout)}
            )
        self.previous = trained

    def take(self) -> list[dict[str, float]]:
        """The records since the last call, oldest first."""
        records, self.pending = self.pending, []
        return records


def step_metrics(records: list[dict[str, float]]) -> dict[str, float]:
    """A step's ``adapter_sync`` metrics from the syncs since the last step (every replica's): the worst one, a
    sync whose trained adapters changed while the rollout's did not, before any other; none without a sync.

    >>> ok, skipped = (
    ...     {"lora/sync_trained_changed": 1.0, "lora/sync_rollout_changed": 1.0},
    ...     {"lora/sync_trained_changed": 1.0, "lora/sync_rollout_changed": 0.0},
    ... )
    >>> step_metrics([ok, skipped, ok]), step_metrics([])
    ({'lora/sync_trained_changed': 1.0, 'lora/sync_rollout_changed': 0.0}, {})
    """
    if not records:
        return {}
    worst = max(
        records,
        key=lambda r: (
            r[ADAPTERS_TRAINED_CHANGED] - r[ADAPTERS_ROLLOUT_CHANGED],
            r[ADAPTERS_TRAINED_CHANGED],
        ),
    )
    return {key: worst[key] for key in (ADAPTERS_TRAINED_CHANGED, ADAPTERS_ROLLOUT_CHANGED)}


RECORDS_VAR = "RAGYM_ADAPTER_SYNC_RECORDS"
"""Environment variable: the folder where rollout processes outside Ray (vLLM's workers) leave their adapter-sync
records; the trainer sets it for the rollout servers it launches (``PlatformCPU.rollout_env_vars``)."""


def leave_records(records: list[dict[str, float]], folder: Path) -> None:
    """Write each record to its own file in ``folder`` (atomically: a reader never sees half a record).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> leave_records([{"step": 0.0, "lora/sync_rollout_changed": 1.0}], folder)
    >>> take_left_records(folder), take_left_records(folder)
    ([{'step': 0.0, 'lora/sync_rollout_changed': 1.0}], [])
    """
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        name = f"{time.time_ns():020d}-{os.getpid()}"
        partial = folder / f"{name}.tmp"
        partial.write_text(json.dumps(record))
        partial.rename(folder / f"{name}.json")


def take_left_records(folder: Path) -> list[dict[str, float]]:
    """The records ``leave_records`` left in ``folder`` since the last call, oldest first; each is taken once."""
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        records.append(json.loads(path.read_text()))
        path.unlink()
    return records
