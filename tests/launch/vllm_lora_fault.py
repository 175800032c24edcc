"""A planted fault for the LoRA agreement test on ragym's CPU vLLM rollout (test-only: a recipe names it as
``rollout.engine_kwargs.vllm.worker_extension_cls``, and vLLM's worker processes import it): from the adapter sync
of weight version ``RAGYM_LORA_FAULT_FROM`` on, the worker takes every sync and digests the adapters it was sent,
but hands vLLM the adapters of the sync before it, so vLLM goes on serving them (volcengine/verl#7495's signature).
The agreement of the rollout's log-probs with the trainer's and the ``adapter_sync`` run check can see it."""

from __future__ import annotations

import os
import sys

import torch

from ragym.rl.guards import adapter_digest
from ragym.rl.verl_plugin.vllm_worker import CPUWorkerExtension

FAULT_FROM = int(os.environ.get("RAGYM_LORA_FAULT_FROM", "0"))
"""The first weight version whose adapters vLLM is not given (the rollout starts from the policy's files, so every
sync is an adapter sync and version N is the N-th, counted from 0)."""


class StaleAdaptersExtension(CPUWorkerExtension):
    """ragym's CPU worker extension whose adapter loads stop at version ``FAULT_FROM - 1``."""

    syncs_seen: int = 0
    """Adapter syncs so far (the version of the next one)."""
    kept: list[tuple[str, torch.Tensor]] | None = None
    """The last adapters vLLM was given."""

    def _update_weights(
        self, weights: list[tuple[str, torch.Tensor]], peft_config: dict, base_sync_done: bool
    ) -> None:
        if not (peft_config and base_sync_done):
            return super()._update_weights(weights, peft_config, base_sync_done)
        version, self.syncs_seen = self.syncs_seen, self.syncs_seen + 1
        if version < FAULT_FROM or self.kept is None:
            self.kept = [(name, tensor.clone()) for name, tensor in weights]
        super()._update_weights(self.kept, peft_config, base_sync_done)
        self.incoming_digest = adapter_digest(dict(weights))  # what was sent, as a healthy sync digests it


print(
    f"planted fault: vLLM is given no new adapters from weight version {FAULT_FROM} on (tests/launch/vllm_lora_fault.py)",
    file=sys.stderr,
)
