"""The vLLM worker extension of ragym's CPU vLLM rollout; imported by vLLM's worker processes only (it imports
vLLM), through ``engine_kwargs.vllm.worker_extension_cls`` in ``recipes/platforms/vllm_cpu.yaml``."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import torch
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload
from vllm.model_executor.models.utils import WeightsMapper

from ragym.rl.guards import adapter_digest
from ragym.rl.verl_plugin.adapter_sync import RECORDS_VAR, AdapterSyncLog, leave_records

if not hasattr(WeightsMapper, "get_unstacked_mapper"):
    # verl 0.9.1's LoRA loader (its hijack of vLLM's ``_load_adapter``) calls the name vLLM 0.25-0.31 gave the
    # mapper that renames without stacking; vLLM 0.32 (the CPU build, the only one that meets this module) calls it
    # ``get_rename_mapper``. GPU installs pin vLLM 0.24, where verl does not call it.
    WeightsMapper.get_unstacked_mapper = WeightsMapper.get_rename_mapper  # pyright: ignore[reportAttributeAccessIssue]


class CPUWorkerExtension(vLLMColocateWorkerExtension):
    """verl's vLLM worker extension with a weight sync that vLLM's CPU backend can take, step after step.

    vLLM's CPU backend repacks each linear weight for its GEMM kernels after loading and leaves the layer
    without its checkpoint-format parameter (``dispatch_cpu_unquantized_gemm(..., remove_weight=True)``), so
    verl's plain ``load_weights`` of the next step's tensors finds nothing to load into. vLLM's own layerwise
    reload restores each layer's checkpoint-format parameters, loads, and re-packs once a layer is complete:
    the weights then equal a fresh load of the same tensors (``tests/launch/test_verl_vllm.py``).
    """

    model_runner: Any
    """vLLM's worker's model runner: vLLM mixes this extension into its worker class, which sets it."""
    incoming_digest: str = ""
    """Digest of the adapters the last LoRA sync brought (``adapter_digest``)."""

    @functools.cached_property
    def adapter_syncs(self) -> AdapterSyncLog:
        """The ``adapter_sync`` run check's records of this worker's LoRA syncs (``ragym.rl.verl_plugin.adapter_sync``)."""
        return AdapterSyncLog()

    def served_adapters_digest(self) -> str:
        """Digest of the LoRA adapters vLLM holds now (every registered adapter's A and B; "" for none): what a
        request with the policy's LoRA computes with."""
        registered = self.model_runner.lora_manager._adapter_manager.list_adapters()
        tensors = {}
        for adapter_id, model in registered.items():
            for module, weights in model.loras.items():
                for side in ("lora_a", "lora_b"):
                    # A packed module's (qkv, gate_up) side is a list: one tensor per sub-layer, None where absent.
                    value = getattr(weights, side)
                    parts = value if isinstance(value, list) else [value]
                    for i, part in enumerate(parts):
                        if part is not None:
                            tensors[f"{adapter_id}.{module}.{side}.{i}"] = part
        return adapter_digest(tensors) if tensors else ""

    def _update_weights(
        self, weights: list[tuple[str, torch.Tensor]], peft_config: dict, base_sync_done: bool
    ) -> None:
        """verl's load of one sync's tensors, the incoming adapters digested first (an adapter sync hands all of them
        in one call)."""
        if peft_config and base_sync_done:
            self.incoming_digest = adapter_digest(dict(weights))
        super()._update_weights(weights, peft_config, base_sync_done)

    def update_weights_from_ipc(
        self, peft_config: dict | None = None, base_sync_done: bool = False, use_shm: bool = False
    ) -> None:
        """Receive the trainer's full weights bucket by bucket and reload them in place; LoRA adapters (after the
        base sync) go verl's way, as one LoRA request that replaces the previous one."""
        if peft_config and base_sync_done:
            before = self.served_adapters_digest()
            super().update_weights_from_ipc(peft_config, base_sync_done, use_shm)
            self.adapter_syncs.record(None, self.incoming_digest, (before, self.served_adapters_digest()))
            folder = os.environ.get(RECORDS_VAR)
            if folder:
                leave_records(self.adapter_syncs.take(), Path(folder))
            return
        if peft_config:
            # verl's base sync under LoRA (after a dummy-weight start) names weights as peft does (``base_layer``),
            # which vLLM's reload does not know: the CPU rollout loads the base from the policy's files instead.
            raise NotImplementedError(
                "ragym's CPU vLLM rollout takes LoRA adapters only: set actor_rollout_ref.rollout.load_format=auto "
                "(vLLM loads the base weights from the policy's files)"
            )
        model = self.model_runner.model
        initialize_layerwise_reload(model)  # every layer gets its checkpoint-format parameters back

        def load(weights: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
            # The receiver hands out views of its shared-memory bucket, which the next bucket overwrites while
            # a half-loaded layer still holds them (and whose close fails while they live): load copies.
            # verl annotates peft_config as a dict but reads it only for truth (None: full weights, as its callers).
            clones = [(name, tensor.clone()) for name, tensor in weights]
            self._update_weights(clones, None, False)  # pyright: ignore[reportArgumentType]

        receiver = BucketedWeightReceiver(
            zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"), use_shm=use_shm
        )
        receiver.receive_weights(on_bucket_received=load)
        end_reload(model, self.model_runner.vllm_config.model_config)


def end_reload(model: torch.nn.Module, model_config: object) -> None:
    """After ``initialize_layerwise_reload`` and ``model.load_weights``: process the reloaded layers for the CPU
    kernels, then re-pack every vocabulary embedding's GEMM copy.

    A tied output layer shares the embedding's weight but keeps a packed copy of its own for the logits GEMM;
    the layerwise reload processes only one owner of a tied parameter (vLLM's stated limitation), so the
    output layer would go on computing logits from the old weights."""
    finalize_layerwise_reload(model, model_config)
    for module in model.modules():
        if isinstance(module, VocabParallelEmbedding):
            module.quant_method.process_weights_after_loading(module)
