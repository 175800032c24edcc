"""The environment of a CPU vLLM run's processes (``vllm_cpu_environment``): no vLLM runs here."""

from __future__ import annotations

import os

from ragym.rl.verl_plugin.vllm_cpu import VLLM_CPU_PATH, vllm_cpu_environment


def test_a_cpu_vllm_run_puts_its_path_first_and_runs_torch_eagerly() -> None:
    env = vllm_cpu_environment({"PYTHONPATH": os.pathsep.join(["/a", str(VLLM_CPU_PATH)]), "HOME": "/h"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(VLLM_CPU_PATH), "/a"]
    assert env["TORCHDYNAMO_DISABLE"] == "1"
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["HOME"] == "/h"


def test_a_users_compiler_setting_wins() -> None:
    assert vllm_cpu_environment({"TORCHDYNAMO_DISABLE": "0"})["TORCHDYNAMO_DISABLE"] == "0"
