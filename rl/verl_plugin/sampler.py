"""The replay buffers of ragym's verl trainer modes: verl's synchronous and asynchronous ones, each with DAPO's
generation bound and the held-out episodes kept for ragym's ``val/`` metrics.

verl 0.9.1's sync ``ReplayBuffer`` drops a finished group whose ``algorithm.filter_groups.metric`` is flat, and
dispatches two fresh prompts per drop while fewer than ``train_batch_size`` groups vary, with no end: it ignores
``max_num_gen_batches`` (its trainer says so and bounds only the prompts in flight). verl's DAPO recipe bounds
the generation batches of a step. This buffer bounds a step at ``max_num_gen_batches`` x the batch size of
prompts, as that recipe counts: at most ``max_num_gen_batches - 1`` batches' worth of refills, and as many
drops (each drop is refilled, so the step always fills). Past the bound, flat groups are kept and trained on,
after every varying group (the local engine's top-up, ``ragym.rl.core.dynamic_sampling``): where the DAPO
recipe stops the run, ragym trains on a step with less signal and logs how many groups were topped up.

verl's async ``ReplayBufferAsync`` (trainer modes ``colocate_async``, ``separate_async``) refills exactly the
groups it evicts (stale, flat or failed), also without end; its ragym form bounds the flat groups a step drops
at the same ``(max_num_gen_batches - 1)`` x the batch size and keeps the rest, and leaves verl's refill of each
eviction as it is (a stale group dropped past the bound must still be replaced, or the step never fills).

Both override only the seams verl's ``sample`` loops call (the refill function, which flat groups are evicted,
the order they select in); the loops themselves, and the eviction of trajectories older than the staleness bound
(``trainer.v1.sampler.max_off_policy_threshold``), are verl's.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import TYPE_CHECKING, Any, TypeVar

import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from ragym.rl.agent_loop.verl_metrics import tq_column

VAL_PARTITION = "val"
"""verl's TransferQueue partition of held-out prompts."""
TOPPED_UP_KEY = "training/filter_groups/topped_up_samples"
"""Flat groups a step trained on because the bound was reached (beside verl's ``evicted_samples``)."""

S = TypeVar("S", bound="_RagymSampling")

# A mixin placed before verl's buffer in the bases: checked as a ReplayBuffer subclass, so ``super()`` and the
# attributes verl's constructor sets have verl's types; at run time its base is object.
_Base = ReplayBuffer if TYPE_CHECKING else object


class _RagymSampling(_Base):
    """What ragym adds to either of verl's buffers: the per-step bound on flat drops (and, in the sync buffer, on
    refills) and a record of the held-out episodes handed out. Placed before verl's class in the bases."""

    def __init__(self, *, max_num_gen_batches: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_num_gen_batches = max_num_gen_batches
        """Generation batches per step, the first included; 0 or less: no bound (verl's own behaviour)."""
        self._refill_unbounded = self.refill_fn
        self.refill_fn = self._refill
        self._refills_left = self._drops_left = 0
        self._kept_flat: set[str] = set()
        self.val_episodes: list[tuple[str, dict]] = []
        """``(uid, extra_fields)`` of every held-out trajectory sampled since the trainer last took them."""

    @classmethod
    def like(cls: type[S], buffer: ReplayBuffer, max_num_gen_batches: int) -> S:
        """This buffer with the settings verl's trainer gave ``buffer`` (its constructor keeps each as is)."""
        names = [name for name in inspect.signature(ReplayBuffer.__init__).parameters if name != "self"]
        return cls(max_num_gen_batches=max_num_gen_batches, **{name: getattr(buffer, name) for name in names})

    @property
    def bounded(self) -> bool:
        """Whether flat groups are filtered with a bound on the rollouts a step may take."""
        return self.filter_groups_metric is not None and self.max_num_gen_batches > 0

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        """verl's ``sample``, within this step's bound; held-out batches are recorded for ``take_val_episodes``."""
        if partition_id == VAL_PARTITION:
            batch, metrics = super().sample(global_steps, partition_id, batch_size)
            self._record_val(batch)
            return batch, metrics
        if not self.bounded:
            return super().sample(global_steps, partition_id, batch_size)
        self._refills_left = self._drops_left = (self.max_num_gen_batches - 1) * batch_size
        self._kept_flat = set()
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        selected = {key.split("_")[0] for key in batch.keys}
        metrics[TOPPED_UP_KEY] = len(selected & self._kept_flat)
        return batch, metrics

    def take_val_episodes(self) -> list[tuple[str, dict]]:
        """The held-out trajectories recorded since the last call, and forget them."""
        episodes, self.val_episodes = self.val_episodes, []
        return episodes

    # ----- the seams of verl's sample loops --------------------------------------------------------
    def _refill(self, num_prompts: int) -> int:
        """verl's refill, cut to what the bound has left (verl's loop counts its credit as spent either way)."""
        if not self.bounded:
            return self._refill_unbounded(num_prompts)
        num_prompts = min(num_prompts, self._refills_left)
        if num_prompts <= 0:
            return 0
        self._refills_left -= num_prompts
        return self._refill_unbounded(num_prompts)

    def _terminal_eviction_reasons(
        self, global_steps: int, partition_id: str
    ) -> tuple[set[str], set[str], set[str], Counter]:
        """verl's reasons, with flat groups evicted only while the bound has drops left; the rest are kept."""
        stale, flat, failed, counts = super()._terminal_eviction_reasons(global_steps, partition_id)
        if partition_id == VAL_PARTITION or not self.bounded:
            return stale, flat, failed, counts
        # A group once kept stays kept: verl reports every flat group still stored at each poll.
        new = sorted(flat - self._kept_flat)
        dropped = set(new[: self._drops_left])
        self._drops_left -= len(dropped)
        self._kept_flat |= set(new) - dropped
        values = self._dapo_classification_cache[partition_id]
        return stale, dropped, failed, Counter(values[uid] for uid in dropped)

    def _select_prompt_uids(
        self, partition_id: str, sampleable_keys: set[str], batch_size: int
    ) -> tuple[list[str], dict[str, dict], dict[str, int]]:
        """verl's choice (oldest first), varying groups before kept flat ones of the same age, then by uid: verl
        sorts a set, so its ties fall in hash order and a run's batches change with ``PYTHONHASHSEED``."""
        ordered = sorted(
            sampleable_keys, key=lambda uid: (uid in self._kept_flat, uid)
        )  # verl's sort is stable
        # verl annotates a set but only sorts it: the list carries ragym's order into verl's stable sort.
        return super()._select_prompt_uids(partition_id, ordered, batch_size)  # pyright: ignore[reportArgumentType]

    def _record_val(self, batch: Any) -> None:
        keys = [
            key for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)
        ]
        if not keys:
            return
        data = tq.kv_batch_get(
            keys=keys, partition_id=batch.partition_id, select_fields=["uid", "extra_fields"]
        )
        uids, fields = tq_column(data, "uid"), tq_column(data, "extra_fields")
        self.val_episodes += [(str(uid), dict(extra)) for uid, extra in zip(uids, fields, strict=True)]


class RagymReplayBuffer(_RagymSampling, ReplayBuffer):
    """verl's sync replay buffer, with the refill bound and a record of the held-out episodes it hands out."""


class RagymReplayBufferAsync(_RagymSampling, ReplayBufferAsync):
    """verl's async replay buffer (stale trajectories evicted and counted by verl), with the bound on flat drops
    and a record of the held-out episodes it hands out."""

    def _refill(self, num_prompts: int) -> int:
        """verl's refill of exactly what was evicted: flat drops are already within the bound, and stale or failed
        groups must be replaced for the step to fill."""
        return self._refill_unbounded(num_prompts)

    def get_sampleable_count(self, global_steps: int, partition_id: str) -> int:
        """verl's count (separate_async's hybrid switch asks it between steps), spending none of the bound."""
        drops_left, kept = self._drops_left, set(self._kept_flat)
        try:
            return super().get_sampleable_count(global_steps, partition_id)
        finally:
            self._drops_left, self._kept_flat = drops_left, kept


def ragym_buffer_like(
    buffer: ReplayBuffer, max_num_gen_batches: int
) -> RagymReplayBuffer | RagymReplayBufferAsync:
    """ragym's form of the buffer verl's trainer built for its mode (sync or async), with verl's settings."""
    cls = RagymReplayBufferAsync if isinstance(buffer, ReplayBufferAsync) else RagymReplayBuffer
    return cls.like(buffer, max_num_gen_batches)
