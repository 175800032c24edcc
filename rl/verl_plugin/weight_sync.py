"""A checkpoint engine that moves the trainer's weights to standalone rollout replicas through Ray's object store
(``actor_rollout_ref.rollout.checkpoint_engine.backend: ragym_object_store``), for ``separate_async`` on CPU.

verl's ``separate_async`` trainer serves rollouts from replicas on their own (logical) GPUs and refuses the
``naive`` engine, which only hands tensors over inside the trainer's process; its engines for that (NCCL, NIXL,
Mooncake, HCCL) need an accelerator. This one runs anywhere Ray does: the trainer's rank 0 gathers the full
tensors (every rank walks verl's generator, which is collective over the trainer's workers), puts them in the
object store once, and leaves the reference in a named mailbox actor under a token the sync's topology gave
every worker; each rollout worker takes it from there. One full copy of the policy per sync passes through the
object store, which suits tiny CPU policies (tests, ``--toy``), not a 7B model: GPU recipes use ``nccl``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterable, Generator, Iterable
from typing import Any, cast

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

BACKEND = "ragym_object_store"
"""``checkpoint_engine.backend`` of this engine."""
MAILBOX = "ragym_weight_mailbox"
"""Ray name of the actor that hands each sync's object reference from the trainer to the rollout workers."""


@ray.remote(num_cpus=0)
class WeightMailbox:
    """Holds each sync's reference (wrapped in a list, so Ray passes the reference, not the weights) until the
    sender's ``finalize``; a taker that comes first waits for it."""

    def __init__(self) -> None:
        self._refs: dict[str, list[ray.ObjectRef]] = {}
        self._ready: dict[str, asyncio.Event] = {}

    def _event(self, token: str) -> asyncio.Event:
        return self._ready.setdefault(token, asyncio.Event())

    async def put(self, token: str, wrapped: list[ray.ObjectRef]) -> None:
        self._refs[token] = wrapped
        self._event(token).set()

    async def take(self, token: str) -> list[ray.ObjectRef]:
        await self._event(token).wait()
        return self._refs[token]

    async def forget(self, token: str) -> None:
        self._refs.pop(token, None)
        self._ready.pop(token, None)


_mailbox: Any = None
"""The trainer process's handle on the mailbox."""


# verl declares ``register`` without @staticmethod, so pyright binds the class to ``backend``; Python 3 does not.
@CheckpointEngineRegistry.register(BACKEND)  # pyright: ignore[reportAttributeAccessIssue]
class ObjectStoreCheckpointEngine(CheckpointEngine):
    """Trainer rank 0 sends, every rollout worker receives, through the object store (see the module's doc)."""

    def __init__(self, bucket_size: int, is_master: bool = False, **kwargs: Any) -> None:
        self.bucket_size = bucket_size  # verl passes it to every engine; whole tensors travel here
        self.is_master = is_master
        self.token: str | None = None
        self._sent: ray.ObjectRef | None = None

    def prepare(self) -> dict[str, Any]:
        return {}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """One fresh token per sync for every worker; the mailbox is started here (the trainer's process) once."""
        global _mailbox
        if _mailbox is None:
            # Held for the run: a named actor whose last handle goes is gone, name and all.
            _mailbox = WeightMailbox.options(name=MAILBOX, get_if_exists=True).remote()
            ray.get(_mailbox.__ray_ready__.remote())  # its name resolves in the workers from here on
        token = uuid.uuid4().hex
        return {"token": [token] * actor_wg_world_size}, {"token": [token] * rollout_world_size}

    # verl passes build_topology's keys as keywords (``**kwargs`` in its base): here the one token.
    def init_process_group(self, token: str) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        self.token = token

    def finalize(self) -> None:
        """After every worker has received: the sender lets the weights go."""
        if self.is_master and self.token is not None:
            ray.get(ray.get_actor(MAILBOX).forget.remote(self.token))
        self._sent, self.token = None, None

    async def send_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]] | AsyncIterable[tuple[str, torch.Tensor]],
        global_steps: int | None = None,
    ) -> dict:  # fmt: skip
        """Rank 0: put the full tensors in the object store and post the reference; other ranks only walk."""
        state = {}
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_master:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_master:
            self._sent = ray.put(state)
            await ray.get_actor(MAILBOX).put.remote(self.token, [self._sent])
        return {}

    # verl's abstract method is an ``async def`` annotated as returning a plain Generator, which no async def
    # can; verl's own ColocatedCheckpointEngine overrides it with a plain generator too, as here.
    def receive_weights(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, global_steps: int | None = None
    ) -> Generator[tuple[str, torch.Tensor], None, None]:
        """The sync's tensors, once the trainer has posted them (a plain generator: the rollout's adapter reads
        it with ``for``)."""
        # The mailbox returns the posted [reference]; an actor call's result is untyped.
        [ref] = cast(list[ray.ObjectRef], ray.get(ray.get_actor(MAILBOX).take.remote(self.token)))
        yield from ray.get(ref).items()
