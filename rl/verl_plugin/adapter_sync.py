"""The ``adapter_sync`` run check fed from real weight syncs, in every trainer mode.

Where the hf rollout loads a sync that carries LoRA adapters, its server (``AdapterSyncLog``) fingerprints the
incoming adapters and its own before and after loading them (``ragym.rl.guards.adapter_digest``): whether the
trainer's adapters changed since the previous sync, whether the rollout's changed in this one. ragym's trainer
takes those records from every replica at each step (``rollout.take_adapter_syncs``, after verl's sync of that
step) and logs them as ``lora/sync_trained_changed`` and ``lora/sync_rollout_changed`` (``step_metrics``), which
the ``adapter_sync`` guard reads. One mechanism for ``sync``, ``colocate_async`` and ``separate_async``: every mode
syncs through the server's ``update_weights``.
"""

from __future__ import annotations

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
