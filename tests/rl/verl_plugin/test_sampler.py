"""ragym's replay buffer under verl's own sync ``sample`` loop, on a made-up TransferQueue: DAPO's generation bound
(drops and refills up to ``max_num_gen_batches`` x the batch, then flat groups topped up after the varying ones),
and the held-out episodes kept for ``val/`` metrics."""

from __future__ import annotations

from collections import defaultdict

import pytest
from verl.trainer.ppo.v1 import replay_buffer as rb

from ragym.rl.verl_plugin import sampler
from ragym.rl.verl_plugin.sampler import (
    TOPPED_UP_KEY,
    RagymReplayBuffer,
    RagymReplayBufferAsync,
    ragym_buffer_like,
)

GROUP_SIZE = 2


class FakeQueue:
    """TransferQueue as the buffer reads it: prompt tags and trajectories under ``{uid}_{session}_0``. A prompt
    dispatched at one poll finishes at the next, its G episodes scored by the next rewards of the script."""

    def __init__(self, script: list[tuple[float, ...]]) -> None:
        self.script = list(script)
        self.tags: dict[str, dict[str, dict]] = defaultdict(dict)
        self.fields: dict[str, dict] = {}
        self.running: list[tuple[str, tuple[float, ...]]] = []
        self.num_dispatched = 0
        self.global_steps = 1
        """The trainer's step when a prompt is dispatched (its tag; async buffers age prompts by it)."""

    def dispatch(self, num_prompts: int, partition: str = "train") -> int:
        for _ in range(num_prompts):
            uid = f"p{self.num_dispatched}"
            self.num_dispatched += 1
            self.tags[partition][uid] = {
                "is_prompt": True,
                "status": "running",
                "global_steps": self.global_steps,
            }
            self.running.append((uid, self.script.pop(0)))
        return num_prompts

    def kv_list(self, partition_id: str | None = None) -> dict:
        for uid, rewards in self.running:  # a poll: what ran since the last one has finished
            partition = "val" if uid in self.tags["val"] else "train"
            self.tags[partition][uid]["status"] = "finished"
            for session, reward in enumerate(rewards):
                key = f"{uid}_{session}_0"
                self.tags[partition][key] = {"status": "success"}
                self.fields[key] = {
                    "uid": uid,
                    "extra_fields": {
                        "reward_extra_info": {"score": reward},
                        "episode_metrics": {"turns": 2.0},
                    },
                }
        self.running = []
        return {p: dict(items) for p, items in self.tags.items()}

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> dict:
        return {name: [self.fields[key][name] for key in keys] for name in select_fields}

    def kv_clear(self, partition_id: str, keys: list[str]) -> None:
        for key in keys:
            self.tags[partition_id].pop(key, None)


def make_buffer(
    monkeypatch, script, max_num_gen_batches: int, cls: type = RagymReplayBuffer, threshold: int | None = None
) -> tuple[RagymReplayBuffer, FakeQueue]:
    queue = FakeQueue(script)
    monkeypatch.setattr(rb, "tq", queue)
    monkeypatch.setattr(sampler, "tq", queue)
    buffer = cls(
        max_num_gen_batches=max_num_gen_batches,
        trainer_mode="sync" if cls is RagymReplayBuffer else "colocate_async",
        trainer_config={},
        max_off_policy_threshold=threshold,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        poll_interval=0.0,
        refill_fn=queue.dispatch,
        filter_groups_metric="score",
        train_batch_size=2,
        gen_batch_size=1,
        max_inflight_gen_batches=1,
    )
    return buffer, queue


def step(buffer: RagymReplayBuffer, queue: FakeQueue) -> tuple[list[str], dict]:
    """One training step's sampling: the trainer dispatches the batch, then samples it."""
    queue.dispatch(2)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    return sorted({key.split("_")[0] for key in batch.keys}), metrics


FLAT, VARIES = (1.0,) * GROUP_SIZE, (0.0, 1.0)


def test_flat_groups_are_dropped_and_refilled_within_the_bound(monkeypatch):
    # p0 flat, p1 varies; p0's drop brings two refills (verl's 2k): p2 varies, p3 is surplus.
    buffer, queue = make_buffer(monkeypatch, [FLAT, VARIES, VARIES, VARIES], max_num_gen_batches=3)
    selected, metrics = step(buffer, queue)
    assert selected == ["p1", "p2"] and queue.num_dispatched == 4
    assert metrics["training/filter_groups/evicted_samples"] == 1
    assert metrics["training/filter_groups/discarded_surplus_samples"] == 1
    assert metrics[TOPPED_UP_KEY] == 0


def test_at_the_bound_flat_groups_are_kept_and_trained_on_after_the_varying_ones(monkeypatch):
    # Bound 2 x 2 prompts: the first two flat groups are dropped and refilled (2 refills); the refills' flat
    # group is then kept, and the step trains on the one varying group plus it.
    buffer, queue = make_buffer(monkeypatch, [FLAT, FLAT, FLAT, VARIES, VARIES], max_num_gen_batches=2)
    selected, metrics = step(buffer, queue)
    assert queue.num_dispatched == 4  # never more than max_num_gen_batches x the batch
    assert selected == ["p2", "p3"]
    assert metrics["training/filter_groups/evicted_samples"] == 2
    assert metrics[TOPPED_UP_KEY] == 1


def test_a_bound_of_one_batch_drops_nothing(monkeypatch):
    buffer, queue = make_buffer(monkeypatch, [FLAT, FLAT, VARIES], max_num_gen_batches=1)
    selected, metrics = step(buffer, queue)
    assert selected == ["p0", "p1"] and queue.num_dispatched == 2
    assert "training/filter_groups/evicted_samples" not in metrics and metrics[TOPPED_UP_KEY] == 2


def test_without_a_bound_it_is_verls_buffer(monkeypatch):
    # verl's own behaviour: refill (two per drop) until the batch varies, however long it takes.
    buffer, queue = make_buffer(monkeypatch, [FLAT, FLAT] * 3 + [VARIES] * 4, max_num_gen_batches=0)
    selected, metrics = step(buffer, queue)
    assert selected == ["p6", "p7"] and metrics["training/filter_groups/evicted_samples"] == 6
    assert TOPPED_UP_KEY not in metrics


# ----- verl's async buffer (trainer modes ragym_colocate_async, ragym_separate_async) ---------------------------
def async_step(
    buffer: RagymReplayBufferAsync, queue: FakeQueue, global_steps: int = 1
) -> tuple[list[str], dict]:
    batch, metrics = buffer.sample(global_steps=global_steps, partition_id="train", batch_size=2)
    return sorted({key.split("_")[0] for key in batch.keys}), metrics


def test_async_trajectories_older_than_the_bound_are_dropped_counted_and_replaced(monkeypatch):
    # Bound 2: prompts dispatched at step 1 span 3 weight versions by step 3 (1, 2, 3): verl's buffer drops them
    # and dispatches as many fresh ones (at step 3), which are sampled instead.
    buffer, queue = make_buffer(monkeypatch, [VARIES] * 4, 0, cls=RagymReplayBufferAsync, threshold=2)
    queue.dispatch(2)
    queue.global_steps = 3
    selected, metrics = async_step(buffer, queue, global_steps=3)
    assert selected == ["p2", "p3"] and queue.num_dispatched == 4
    assert metrics["training/off_policy/evicted_samples"] == 2
    assert metrics["training/off_policy/evicted_samples_staleness/max"] == 3
    # Within the bound (span 2 at step 2) nothing is dropped.
    buffer, queue = make_buffer(monkeypatch, [VARIES] * 2, 0, cls=RagymReplayBufferAsync, threshold=2)
    queue.dispatch(2)
    selected, metrics = async_step(buffer, queue, global_steps=2)
    assert selected == ["p0", "p1"] and "training/off_policy/evicted_samples" not in metrics


def test_async_flat_groups_are_dropped_within_the_bound_then_kept(monkeypatch):
    # Bound 2 x 2 prompts: p0, p1 flat are dropped and replaced one for one (verl's async refill); the
    # replacements' flat group p2 is past the bound, kept, and trained on after the varying p3.
    script = [FLAT, FLAT, FLAT, VARIES, VARIES]
    buffer, queue = make_buffer(monkeypatch, script, 2, cls=RagymReplayBufferAsync, threshold=4)
    queue.dispatch(2)
    selected, metrics = async_step(buffer, queue)
    assert selected == ["p2", "p3"] and queue.num_dispatched == 4
    assert metrics["training/filter_groups/evicted_samples"] == 2 and metrics[TOPPED_UP_KEY] == 1
    # Without the bound it is verl's async buffer: p2 is dropped too and p4 replaces it.
    buffer, queue = make_buffer(monkeypatch, script, 0, cls=RagymReplayBufferAsync, threshold=4)
    queue.dispatch(2)
    selected, metrics = async_step(buffer, queue)
    assert selected == ["p3", "p4"] and metrics["training/filter_groups/evicted_samples"] == 3


def test_counting_sampleable_groups_spends_none_of_the_bound(monkeypatch):
    buffer, queue = make_buffer(monkeypatch, [FLAT, VARIES], 2, cls=RagymReplayBufferAsync, threshold=4)
    buffer._drops_left = 2
    queue.dispatch(2)
    assert buffer.get_sampleable_count(1, "train") == 1  # p0 would be dropped: not sampleable
    assert buffer._drops_left == 2 and buffer._kept_flat == set()


@pytest.mark.parametrize("cls", [RagymReplayBuffer, RagymReplayBufferAsync])
def test_held_out_batches_are_recorded_once(monkeypatch, cls):
    buffer, queue = make_buffer(monkeypatch, [VARIES], max_num_gen_batches=2, cls=cls, threshold=1)
    queue.tags["val"]["p0"] = {}  # registered in the held-out partition, as verl's _validate does
    queue.dispatch(1, partition="val")
    batch, _ = buffer.sample(global_steps=1, partition_id="val", batch_size=1)
    episodes = buffer.take_val_episodes()
    assert [uid for uid, _ in episodes] == ["p0", "p0"] and len(batch.keys) == GROUP_SIZE
    assert [fields["reward_extra_info"]["score"] for _, fields in episodes] == list(VARIES)
    assert buffer.take_val_episodes() == []


@pytest.mark.parametrize("bound", [0, 2])
def test_it_keeps_the_settings_verl_gave_its_own_buffer(monkeypatch, bound):
    """Sync: the refill cap and the settings verl chose (``like``); async: verl's async buffer, ragym's form."""
    verl_buffer = rb.ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        refill_fn=print,
        filter_groups_metric="reward",
        train_batch_size=4,
        gen_batch_size=1,
        max_inflight_gen_batches=3,
    )
    ours = RagymReplayBuffer.like(verl_buffer, bound)
    assert (ours.filter_groups_metric, ours.train_batch_size, ours.max_inflight_gen_batches) == (
        "reward",
        4,
        3,
    )
    assert ours.bounded == (bound > 0) and ours._refill_unbounded is print
    assert type(ragym_buffer_like(verl_buffer, bound)) is RagymReplayBuffer
    verl_async = rb.ReplayBufferAsync(
        trainer_mode="colocate_async",
        trainer_config={},
        max_off_policy_threshold=3,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        refill_fn=print,
        filter_groups_metric="reward",
    )
    theirs = ragym_buffer_like(verl_async, bound)
    assert type(theirs) is RagymReplayBufferAsync and theirs.max_off_policy_threshold == 3


def test_the_ragym_trainer_samples_with_verls_sync_buffer_and_the_recipes_bound(caplog):
    """verl picks its buffer, refill granularity and TransferQueue checkpoints by ``trainer_mode == "sync"``;
    ragym's mode is the sync trainer under another name, so it must get the sync buffer (not the async one),
    bounded by the recipe, without verl's warning that the bound is ignored."""
    import logging

    from ragym.rl.recipe.check import check_recipe
    from ragym.rl.recipe.compose import resolve_recipe_path
    from ragym.rl.verl_plugin.trainer import RagymTrainer

    config = check_recipe(
        resolve_recipe_path("kbvqa_qwen2_5_vl_7b"),
        ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=3"],
    )
    trainer = RagymTrainer.__new__(RagymTrainer)  # verl's __init__ starts workers; this is the part it calls
    trainer.config = config
    with caplog.at_level(logging.INFO):
        buffer = trainer._build_replay_buffer()
    assert type(buffer) is RagymReplayBuffer and trainer.trainer_mode == "sync"
    assert buffer.bounded and buffer.max_num_gen_batches == 3
    assert buffer.train_batch_size == config.data.train_batch_size and buffer.gen_batch_size == 1
    assert "is ignored" not in caplog.text
