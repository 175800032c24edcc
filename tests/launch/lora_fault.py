"""A planted fault for the LoRA agreement tests, loaded into every process of a verl run by
``VERL_USE_EXTERNAL_MODULES=tests.launch.lora_fault`` (test-only: nothing in ragym imports it, and it is not part of
the installed package): from the weight sync of version ``RAGYM_LORA_FAULT_FROM`` on (0 when unset: every sync),
the hf rollout takes every sync, adapters included, and passes every delivery check, but loads only the base
weights, so it keeps serving the adapters it held before. volcengine/verl#7495's signature; the agreement of the
rollout's log-probs with the trainer's and the ``adapter_sync`` run check can see it."""

from __future__ import annotations

import os
import sys

import torch

from ragym.rl import lora

FAULT_FROM = "RAGYM_LORA_FAULT_FROM"
"""Environment variable: the first weight version (``global_steps`` of the sync) whose adapters are skipped."""

_first = int(os.environ.get(FAULT_FROM, "0"))
_load_synced = lora.load_synced


def _sync_version() -> int:
    """The weight version being loaded: ``global_steps`` of the hf server's ``update_weights`` up the stack (read
    there, not by patching the server: verl imports this module while the rollout's module is still importing)."""
    frame = sys._getframe(1)
    while frame is not None and "global_steps" not in frame.f_locals:
        frame = frame.f_back
    return (frame.f_locals["global_steps"] if frame is not None else None) or 0


def _without_adapters(own: dict[str, torch.Tensor], incoming: dict[str, torch.Tensor]) -> None:
    if _sync_version() >= _first:
        incoming = {name: t for name, t in incoming.items() if ".lora_" not in name}
    _load_synced(own, incoming)


lora.load_synced = _without_adapters
print(
    f"planted fault: the hf rollout loads no adapters from weight version {_first} on (tests/launch/lora_fault.py)",
    file=sys.stderr,
)
