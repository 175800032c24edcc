"""A checkpoint engine that moves the trainer's weights to standalone rollout replicas through Ray's object store
(``actor_rollout_ref.rollout.checkpoint_engine.backend: ragym_object_store``), for ``separate_async`` on CPU.

verl's ``separate_async`` trainer serves rollouts from replicas on their own (logical) GPUs and refuses the
``naive`` engine, which only hands tensors over inside the trainer's process; its engines for that (NCCL, NIXL,
Mooncake, HCCL) need an accelerator. This one runs anywhere Ray does: the trainer's rank 0 gathers the full
tensors (every rank walks verl's generator, which is collective over the trainer's workers), puts them in the
object store once, and leaves the reference in a named mailbox actor under a token the sync's topology gave
every worker; each rollout worker takes it from there. One full copy of the policy per sync passes through the
object store, which suits tiny CPU policies (tests, ``--toy``), not a 7B model: GPU recipes use ``nccl``.

Under LoRA (adapter syncs, ``lora.merge: false``) verl 0.9.1's checkpoint-engine sync asks the FSDP engine for
its tensors without ``base_sync_done`` and drops the peft config, so it sends the base weights without the
adapters at every sync: the rollout keeps sampling from the initial policy (volcengine/verl#7495). In a process
that holds this engine, ``lora_sync`` answers that call with the base weights at the first sync and the adapters
at every sync, the peft config first (``PEFT_CONFIG_KEY``), which the hf rollout's adapter reads.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import uuid
from collections.abc import AsyncIterable, Callable, Generator, Iterable
from typing import Any, cast

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from ragym.rl.lora import PEFT_CONFIG_KEY

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
        install_lora_sync()  # this process's LoRA syncs (the trainer's side) send the adapters too
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
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | AsyncIterable[tuple[str, torch.Tensor]],
        global_steps: int | None = None,
    ) -> dict:
        """Rank 0: put the full tensors in the object store and post the reference; other ranks only walk."""
        state = {}
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_master:
                state[name] = tensor if name == PEFT_CONFIG_KEY else tensor.detach().to("cpu", copy=True)
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


def lora_sync(get_per_tensor_param: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap verl's ``FSDPEngine.get_per_tensor_param`` so that its checkpoint-engine caller, which passes no
    arguments (its in-process caller always passes ``base_sync_done``), gets under LoRA adapter syncs the peft
    config, the base weights once and the adapters every time; verl's own answer, otherwise."""

    @functools.wraps(get_per_tensor_param)
    def per_tensor_param(self: Any, *args: Any, **kwargs: Any) -> tuple[Any, dict | None]:
        if args or kwargs:
            return get_per_tensor_param(self, *args, **kwargs)
        adapters, peft_config = get_per_tensor_param(self, base_sync_done=True)
        if peft_config is None:  # full weights, or merged LoRA weights: complete as verl sends them
            return adapters, None
        head: Iterable[tuple[str, Any]] = [(PEFT_CONFIG_KEY, peft_config)]
        # The rollout replica has this run's base weights only after the first sync.
        if not getattr(self, "_ragym_base_sent", False):
            base, _ = get_per_tensor_param(self, base_sync_done=False)
            head = itertools.chain(head, base)
            self._ragym_base_sent = True
        return itertools.chain(head, adapters), peft_config

    return per_tensor_param


def install_lora_sync() -> None:
    """Wrap verl's FSDP engine's ``get_per_tensor_param`` with ``lora_sync`` (once), in a process that holds this
    checkpoint engine: verl's other engines and every other process keep verl's call."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    if not hasattr(FSDPEngine.get_per_tensor_param, "__wrapped__"):
        FSDPEngine.get_per_tensor_param = lora_sync(FSDPEngine.get_per_tensor_param)
