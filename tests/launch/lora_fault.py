"""A planted fault for the LoRA agreement tests, loaded into every process of a verl run by
``VERL_USE_EXTERNAL_MODULES=tests.launch.lora_fault`` (test-only: nothing in ragym imports it, and it is not part of
the installed package): the hf rollout takes every weight sync, adapters included, and passes every delivery
check, but loads only the base weights, so it keeps serving the adapters it attached first (lora_B all zero: the
initial policy). volcengine/verl#7495's signature; only the agreement of the rollout's log-probs with the trainer's
can see it."""

from __future__ import annotations

import sys

import torch

from ragym.rl import lora

_load_synced = lora.load_synced


def _without_adapters(own: dict[str, torch.Tensor], incoming: dict[str, torch.Tensor]) -> None:
    _load_synced(own, {name: t for name, t in incoming.items() if ".lora_" not in name})


lora.load_synced = _without_adapters
print("planted fault: the hf rollout loads no adapters (tests/launch/lora_fault.py)", file=sys.stderr)
