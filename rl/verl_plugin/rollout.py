"""A verl rollout backend (``actor_rollout_ref.rollout.name: hf``) that serves generation from a Hugging Face
model in a Ray actor: ragym's batched ``HFServer`` behind the server interface verl's agent loops call.

verl's hybrid engine keeps the trainer (FSDP) and the rollout server side by side: each step the trainer
sends its weights to the rollout (``HFServerAdapter.update_weights``, in the trainer's process), which hands
them to the server actor, and tags every output with the step of the weights that produced it
(``extra_fields["global_steps"]``, which verl's v1 trainer reads). It exists so verl's own trainer runs on a
machine without a GPU (tests, CI, debugging); on GPUs recipes use vLLM.

Under LoRA (``actor_rollout_ref.model.lora_rank`` > 0) verl's FSDP engine sends, unless ``model.lora.merge`` is
set, the base weights once (peft's ``base_layer`` names, at the first sync) and then the adapters alone each
step, with the peft config; the server attaches the same adapters to its model and loads what arrives. With
``lora.merge`` it sends merged full weights, loaded as any full sync. Each sync's tensors and bytes are logged
and kept in ``stats()["weight_syncs"]``.

Sampling is seeded from ``actor_rollout_ref.rollout.seed``: each turn draws from its own generator, seeded by
that seed, the weights' step, the request id and the turn's prompt length (``turn_seed``), never from a stream
shared with whichever turns arrived in the same batch (which depends on timing). With the request ids that
``rollout.full_determinism`` makes (row and sample, not random), a seeded run's rollouts repeat exactly.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable
from typing import Any, cast

import ray
import torch
from verl.workers.config.rollout import RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from ragym.rl import lora
from ragym.rl.guards import adapter_digest
from ragym.rl.lora import PEFT_CONFIG_KEY, plain_weight_name
from ragym.rl.recipe.modes import PARTIAL_ROLLOUT_KEY, PARTIAL_ROLLOUTS
from ragym.rl.verl_plugin.adapter_sync import AdapterSyncLog

logger = logging.getLogger(__name__)
# Each weight sync's line must reach the run's log from the trainer's Ray worker, whose logging verl leaves at
# WARNING: this module's records go to stderr at INFO themselves (Ray forwards a worker's stderr to the driver).
_handler = logging.StreamHandler()
_handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
logger.addHandler(_handler)
logger.setLevel(logging.INFO)
logger.propagate = False

SERVER_PREFIX = "ragym_hf_"
"""Prefix of the server actors' Ray names (one per replica)."""


def server_actor_name(replica_rank: int) -> str:
    """Ray name of a replica's server actor, which the trainer-side adapter looks up."""
    return f"{SERVER_PREFIX}server_{replica_rank}"


def take_adapter_syncs() -> list[dict[str, float]]:
    """Every hf replica's adapter-sync records since the last call (``AdapterSyncLog``), from the trainer's
    process; none where no hf server runs."""
    names = [name for name in ray.util.list_named_actors() if name.startswith(SERVER_PREFIX)]
    calls = [ray.get_actor(name).take_adapter_syncs.remote() for name in sorted(names)]
    return [record for records in ray.get(calls) for record in records]


def partial_rollout(custom: dict[str, Any] | None) -> str:
    """The ``partial_rollout`` setting of ``rollout.custom`` (``PARTIAL_ROLLOUTS``; absent: ``resume``).

    >>> partial_rollout(None), partial_rollout({"partial_rollout": "finish"})
    ('resume', 'finish')
    """
    value = (custom or {}).get("partial_rollout", PARTIAL_ROLLOUTS[0])
    if value not in PARTIAL_ROLLOUTS:
        raise ValueError(f"{PARTIAL_ROLLOUT_KEY}={value!r}: choose one of {', '.join(PARTIAL_ROLLOUTS)}")
    return value


def turn_seed(seed: int, global_steps: int | None, request_id: str, num_prompt_tokens: int) -> int:
    """The sampling seed of one turn: the rollout's ``seed`` mixed with what names the turn (the weights' step,
    the episode's request id, its prompt length, which grows every turn), as a 63-bit integer.

    >>> turn_seed(42, 1, "det-0-0", 240) == turn_seed(42, 1, "det-0-0", 240) != turn_seed(42, 2, "det-0-0", 240)
    True
    """
    key = f"{seed}/{global_steps}/{request_id}/{num_prompt_tokens}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


class HFGenerationServer:
    """The Ray actor that holds the rollout model: verl's ``generate`` plus the control calls its replicas get."""

    def __init__(self, model_path: str, config: RolloutConfig, lora_adapters: bool = False) -> None:
        from ragym.rl.core.hf_server import HFServer
        from ragym.rl.core.vision import ImageInputs
        from ragym.rl.models import load_policy

        model, tokenizer, processor = load_policy(model_path)
        model.eval()
        self.model = model
        # a null rollout.seed draws as seed 0, as it did before turns were seeded
        self.seed = config.seed or 0
        # batch_wait_s 0: requests that arrive together are batched; none is held back waiting for others.
        self.server = HFServer(
            model,
            tokenizer,
            ImageInputs(processor.image_processor),
            default_max_tokens=config.response_length,
            batch_wait_s=0.0,
            seed=self.seed,
            abortable=True,
        )
        self.partial_rollout = partial_rollout(config.custom)
        self._open = asyncio.Event()  # cleared between verl's abort and resume: new turns wait
        self._open.set()
        self.num_aborts = 0
        self.global_steps: int | None = None
        self.num_weight_updates = 0
        self.peft: Any = None  # the LoRA wrapper, once a sync brings a peft config
        # The run trains LoRA adapters and syncs them (not merged weights): every sync must bring adapters.
        self.lora_adapters = lora_adapters
        self.weight_syncs: list[dict[str, Any]] = []  # per sync: step, kind, tensors and bytes received
        self.adapter_syncs = AdapterSyncLog()  # what the adapter_sync run check reads

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """One turn for ``prompt_ids``, sampled with its ``turn_seed`` (unless the request brings a ``seed``) and
        tagged with the step of the weights that generated it."""
        if video_data:
            raise ValueError("the hf rollout serves images only; this request carries video")
        await self._open.wait()
        seed = turn_seed(self.seed, self.global_steps, request_id, len(prompt_ids))
        sampling_params = {"seed": seed, **sampling_params}
        # The server tags the output with the version of the weights its batch decoded under.
        return await self.server.generate(
            request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, image_data=image_data
        )

    def update_weights(
        self,
        state: dict[str, torch.Tensor],
        global_steps: int | None,
        peft_config: dict[str, Any] | None = None,
        base_sync_done: bool = True,
    ) -> int:
        """Load the trainer's weights; returns how many arrived. verl's in-process LoRA sync (``naive``) sends,
        with its ``peft_config``, either the base weights (``base_sync_done`` false: the first sync where the
        rollout starts from dummy weights) or the adapters alone (every later sync); a checkpoint engine's sync
        (``weight_sync``) brings base and adapters or adapters alone, named as peft names them; without either,
        full (or merged) weights. Every tensor of each kind that arrives must arrive whole, and nothing else; under
        LoRA adapter syncs a sync without adapters (verl's base-only sync aside) is refused."""
        incoming = {plain_weight_name(name): tensor for name, tensor in state.items()}
        base_sync = peft_config is not None and not base_sync_done  # verl's first LoRA sync: the base alone
        kinds = {False} if base_sync else {_is_adapter(name) for name in incoming} or {False}
        if self.lora_adapters and True not in kinds and not base_sync:
            raise ValueError(
                f"step {global_steps}: a LoRA run's weight sync brought no adapters ({len(state)} base tensors): the "
                "rollout would keep sampling from the initial policy (volcengine/verl#7495)"
            )
        if True in kinds and self.peft is None:
            if peft_config is None:
                raise ValueError("adapters arrived before any peft config: the rollout cannot attach them")
            from ragym.rl.lora import attach_adapters

            self.peft = attach_adapters(self.model, peft_config)  # the layers run inside ``self.model``
        own = {plain_weight_name(name): tensor for name, tensor in self.model.state_dict().items()}
        tied = {plain_weight_name(name) for name in _tied_names(self.model)}
        expected = {name for name in own if _is_adapter(name) in kinds}
        unknown = sorted(set(incoming) - expected)
        if unknown:
            raise KeyError(f"weights the rollout model does not have: {unknown[:5]} ({len(unknown)} in all)")
        missing = sorted(expected - set(incoming) - tied)
        if missing:
            raise KeyError(f"weights missing from the update: {missing[:5]} ({len(missing)} in all)")
        with self.server.decoding:  # never under a turn in flight
            # The model's own adapter tensors (none in a base-weight sync): digested before and after the load.
            mine = {name: own[name] for name in expected if _is_adapter(name)}
            before = adapter_digest(mine) if mine else None
            lora.load_synced(own, incoming)  # through the module: a test plants a fault there
            if before is not None:  # an adapter sync, recorded for the adapter_sync run check
                theirs = {name: t for name, t in incoming.items() if _is_adapter(name)}
                self.adapter_syncs.record(
                    global_steps, adapter_digest(theirs), (before, adapter_digest(mine))
                )
            self.server.weight_version = global_steps
        self.global_steps = global_steps
        self.num_weight_updates += 1
        kind = sync_kind(kinds, lora=self.peft is not None or peft_config is not None)
        num_bytes = sum(t.numel() * t.element_size() for t in state.values())
        self.weight_syncs.append(
            {"step": global_steps, "kind": kind, "num_tensors": len(state), "num_bytes": num_bytes}
        )
        return len(state)

    def take_adapter_syncs(self) -> list[dict[str, float]]:
        """The adapter syncs' records (``AdapterSyncLog``) since the last call."""
        return self.adapter_syncs.take()

    def set_global_steps(self, global_steps: int) -> None:
        """Tag later outputs with ``global_steps`` (verl calls it after a weight sync)."""
        with self.server.decoding:
            self.global_steps = self.server.weight_version = global_steps

    def stats(self) -> dict[str, Any]:
        """Generation counters and the weights' step, for tests and benchmarks."""
        s = self.server.stats
        return {
            "generate_s": s.generate_s,
            "num_requests": s.num_requests,
            "num_batches": s.num_batches,
            "num_generated_tokens": s.num_generated_tokens,
            "global_steps": self.global_steps,
            "num_weight_updates": self.num_weight_updates,
            "weight_syncs": self.weight_syncs,
            "num_aborts": self.num_aborts,
        }

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> dict[str, Any]:
        """verl's pause before a weight update: new turns wait for ``resume_generation``; the turns in flight are
        aborted (``partial_rollout: resume``: verl's client resumes them on the new weights) or finish on the
        weights they began with (``finish``). Returns once nothing decodes."""
        self._open.clear()
        self.num_aborts += 1
        if self.partial_rollout == "resume":
            await self.server.abort()
        else:
            await self.server.drain()
        return {}

    async def resume_generation(self) -> None:
        """Let the turns that waited since ``abort_all_requests`` start, on the weights now loaded."""
        self._open.set()

    # Control calls verl's replicas and checkpoint manager make; nothing to free on CPU.
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


def sync_kind(kinds: set[bool], lora: bool) -> str:
    """What a sync carried, as the log line and ``weight_syncs`` name it (``kinds``: which of base/full weights
    (False) and adapters (True) arrived).

    >>> sync_kind({True}, True), sync_kind({False}, True), sync_kind({False, True}, True), sync_kind({False}, False)
    ('adapters', 'base weights', 'base weights + adapters', 'full weights')
    """
    if kinds == {True}:
        return "adapters"
    if kinds == {False, True}:
        return "base weights + adapters"
    return "base weights" if lora else "full weights"


def _is_adapter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def _tied_names(model: torch.nn.Module) -> set[str]:
    """State-dict names that share storage with an earlier name (tied embeddings): they need not arrive."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = tensor.data_ptr()
        if key in seen:
            tied.add(name)
        seen.setdefault(key, name)
    return tied


def lora_adapters(model_config: Any) -> bool:
    """Whether the run trains LoRA adapters and syncs them unmerged (verl's ``HFModelConfig``)."""
    return model_config.lora_rank > 0 and not model_config.lora.get("merge", False)


class HFRolloutReplica(RolloutReplica):
    """One ``HFGenerationServer`` per replica, beside the trainer's workers (hybrid mode)."""

    async def launch_servers(self) -> None:
        """Start the server actor; its Ray name is how the trainer-side adapter finds it."""
        if self.world_size != 1:
            raise ValueError(
                "the hf rollout serves one model per replica: set tensor/data/pipeline parallel sizes to 1"
            )
        server = (
            ray.remote(HFGenerationServer)
            .options(
                name=server_actor_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency
            )
            .remote(str(self.model_config.path), self.config, lora_adapters(self.model_config))
        )
        # Raises here, not at the first request, when the model cannot load. ray types the started actor as
        # ActorProxy[cls]: its methods lack ``.remote`` there, and verl's ActorHandle annotations refuse it,
        # though at run time it is that handle.
        await server.stats.remote()  # pyright: ignore[reportFunctionMemberAccess]
        self.servers = [server]  # pyright: ignore[reportAttributeAccessIssue]
        self._server_handle = server  # pyright: ignore[reportAttributeAccessIssue]
        self._server_address = f"hf-replica-{self.replica_rank}"

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFServerAdapter(BaseRollout):
    """The trainer-side end of the hf rollout: sends each step's weights to this replica's server actor."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        import os

        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ["RANK"])
        self.replica_rank = rank if replica_rank == -1 else replica_rank
        self._server: Any = None

    def _server_actor(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        peft_config: dict[str, Any] | None = None,
        base_sync_done: bool = True,
        **kwargs: Any,
    ) -> None:
        """Gather the trainer's tensors on CPU and load them into the server's model: full weights, or under
        verl's LoRA sync the base weights once and then the adapters alone (``HFGenerationServer.update_weights``)."""
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout takes full tensors (named_tensors), not {wire_format!r}")
        state = {}
        for name, tensor in weights:
            if name == PEFT_CONFIG_KEY:  # ragym's checkpoint engine carries a LoRA sync's peft config in-band
                peft_config = cast(dict[str, Any], tensor)
            else:
                state[name] = tensor.detach().to("cpu", copy=True)
        num_bytes = sum(t.numel() * t.element_size() for t in state.values())
        num_loaded = await self._server_actor().update_weights.remote(
            state, global_steps, peft_config, base_sync_done
        )
        base_sync = peft_config is not None and not base_sync_done
        kind = sync_kind(
            {False} if base_sync else {_is_adapter(n) for n in state} or {False}, peft_config is not None
        )
        logger.info(
            "hf rollout: step %s weight sync: %d tensors, %.3f MB (%s)",
            global_steps,
            num_loaded,
            num_bytes / 1e6,
            kind,
        )

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None
