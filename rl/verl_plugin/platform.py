"""verl's platform interface for a machine without an accelerator: torch's CPU device and gloo.

Registered last (after verl's CUDA, NPU and ROCm platforms), so verl's auto-detection only reaches it when
no accelerator answers: on a GPU node nothing changes.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase


class PlatformCPU(PlatformBase):
    """torch's CPU device behind verl's platform interface; device-side calls are no-ops."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return _CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    # verl passes this to ``device=`` arguments; an int there means an accelerator index (hence the base's int).
    def current_device(self) -> str:  # pyright: ignore[reportIncompatibleMethodOverride]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray still hands each worker one logical GPU; the variable it sets is harmless on CPU.
        return "CUDA_VISIBLE_DEVICES"

    # verl's base documents a context manager but, with no annotation, reads to pyright as returning None.
    @contextmanager
    def nvtx_range(self, msg: str):  # pyright: ignore[reportIncompatibleMethodOverride]
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # Workers are placed on logical GPUs (``ray start --num-gpus N``): verl's resource pools count GPUs.
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def rollout_env_vars(self) -> dict[str, str]:
        # Where the CPU vLLM workers leave their adapter-sync records (``ragym.rl.verl_plugin.adapter_sync``).
        from ragym.rl.verl_plugin.adapter_sync import RECORDS_VAR

        return {RECORDS_VAR: os.environ[RECORDS_VAR]} if RECORDS_VAR in os.environ else {}

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


class _CPUDeviceModule(ModuleType):
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module (no-ops on CPU)."""

    def __getattr__(self, name: str) -> Any:
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name in _NO_OPS:
            return _no_op
        if name in _ZERO:
            return _zero
        if name in _HOST:
            return _HOST[name]
        raise AttributeError(f"the CPU platform's device module has no {name!r}")


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


_NO_OPS = {
    "manual_seed",
    "manual_seed_all",
    "empty_cache",
    "reset_peak_memory_stats",
    "set_device",
    "ipc_collect",
    "reset_accumulated_memory_stats",
    "set_per_process_memory_fraction",
}
"""Device-module calls that only matter on an accelerator."""
_ZERO = {
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "max_memory_reserved",
    "current_device",
    "memory_cached",
}
"""Device-memory counters: an accelerator's memory, none on CPU."""


def _mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """(free, total) bytes of host memory: what an accelerator's ``mem_get_info`` reports for its own."""
    import psutil

    memory = psutil.virtual_memory()
    return memory.available, memory.total


_HOST = {
    "get_rng_state": lambda *args, **kwargs: torch.get_rng_state(),
    "set_rng_state": lambda state, *args, **kwargs: torch.set_rng_state(state),
    "mem_get_info": _mem_get_info,
    "get_device_name": lambda *args, **kwargs: "cpu",
}
"""Calls answered from the host: the CPU generator's state, host memory, the device's name."""

_CPU_DEVICE_MODULE = _CPUDeviceModule("ragym_cpu_device")
