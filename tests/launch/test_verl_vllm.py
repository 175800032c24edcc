"""verl's vLLM rollout, for real, on CPU: ``ragym train --engine verl --toy --rollout vllm``.

The cluster path with vLLM in place of ragym's hf rollout: verl's ``vLLMReplica`` and HTTP server on vLLM's CPU
backend (``make vllm-cpu``), ragym's agent loop with images, the trainer's weights synced into vLLM every step
(ragym's worker extension), the GRPO update, export and eval. The rollout's log-probs of its own samples must
agree with the trainer's as closely as the hf rollout's do: a gap there turns GRPO off-policy without a word.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ragym.rl.verl_plugin.vllm_cpu import vllm_cpu_environment
from tests.launch.test_verl_lora import lora_run
from tests.launch.test_verl_trainer import (
    ON_VLLM,
    RUN_TIMEOUT_S,
    check_two_sync_steps,
    export_and_eval,
    train,
)
from tests.rl.engine_helpers import reference_logprobs
from tests.vllm_cpu import generate, need_vllm_cpu

pytestmark = pytest.mark.ray

FAST_LR = "actor_rollout_ref.actor.optim.lr=1e-3"
"""A learning rate at which one GRPO step moves the tiny policy visibly: a rollout that kept serving the old
weights at step 2 would then disagree with the trainer far beyond ``PROBS_DIFF_BOUND``."""


@pytest.fixture(autouse=True)
def _vllm_cpu() -> None:
    need_vllm_cpu()


@pytest.mark.parametrize("env_id", list(ON_VLLM))
def test_two_grpo_steps_with_vllm_export_and_eval(env_id: str, toy: Path) -> None:
    """The sync trainer's 2 steps with every check of the hf runs (``check_two_sync_steps``), export and eval."""
    recipe = ON_VLLM[env_id]
    out = toy / "vllm" / recipe  # not the hf runs' folder, which verl would resume from
    metrics = train(recipe, toy, "--rollout", "vllm", FAST_LR, f"trainer.default_local_dir={out}")
    assert all(m["training/rollout_probs_diff_valid"] == 1 for m in metrics.values()), metrics
    # The trainer moved the weights at step 1 by far more than the bound allows a stale rollout, and every
    # trajectory of step 2 came from the weights step 1 left (staleness 0 in verl's books).
    assert metrics[1]["actor/grad_norm"] > 0
    check_two_sync_steps(metrics, toy, out, env_id, rollout="vllm")
    export_and_eval(toy, out, f"vllm_{recipe}", env_id)


STALE_ADAPTERS = "tests.launch.vllm_lora_fault.StaleAdaptersExtension"
"""The planted fault's worker extension: vLLM is given no new adapters from weight version ``FAULT_FROM`` on."""


def test_lora_on_vllm_serves_the_trained_adapters_and_its_checks_see_the_fault(
    toy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LoRA on ragym's CPU vLLM rollout, sync mode: verl's own adapter path (every sync one LoRA request of the
    adapters alone, vLLM loading the base from the policy's files) agrees with the trainer while the adapters arrive,
    and the planted stale-adapter fault from ``FAULT_FROM`` fails both checks as on the hf rollout: the log-probs
    part at the step after it and ``adapter_sync`` (from digests taken in vLLM's worker) names that sync."""
    extension = f"++actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls={STALE_ADAPTERS}"
    lora_run(toy, "vllm", (extension,), monkeypatch, rollout="vllm", fault_module=None)


PROCESSOR_KWARGS = {"min_pixels": 3136, "max_pixels": 200704}
"""What ``tests/vllm_cpu/generate.py`` gives vLLM's processor, and the HF side here its own."""


def photos(folder: Path) -> list[Path]:
    """A query and four candidates of real sizes: photographs (scikit-image's) and a 12-megapixel frame."""
    import numpy as np
    from PIL import Image
    from skimage import data

    frames = [data.astronaut(), data.chelsea(), data.coffee(), data.rocket()]
    frames.append(np.random.default_rng(0).integers(0, 255, (3000, 4000, 3), dtype=np.uint8))
    paths = []
    for i, frame in enumerate(frames):
        paths.append(folder / f"photo{i}.png")
        Image.fromarray(frame).save(paths[-1])
    return paths


@pytest.mark.parametrize("arch", ["qwen3_vl", "qwen2_5_vl"])
def test_vllm_serves_synced_weights_as_the_trainer_scores_them(arch: str, toy: Path) -> None:
    """vLLM's server for each policy family starts on ragym's tiny policy; weights reloaded in place (the CPU
    weight sync's path) replace the served ones entirely; every image expands to as many tokens as ragym's
    processor gives it; and vLLM's log-probs of its samples equal a Hugging Face forward of the reloaded policy
    over the same tokens and images."""
    import torch
    from PIL import Image

    from ragym.rl.core.vision import ImageInputs
    from ragym.rl.models import load_policy
    from ragym.rl.tiny.policy import build_tiny_policy

    folder = toy / "served" / arch
    served_first = build_tiny_policy(arch, folder / "first", seed=0)
    synced = build_tiny_policy(arch, folder / "synced", seed=1)
    images = photos(folder)
    env = {**vllm_cpu_environment(dict(os.environ)), "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
    done = subprocess.run(
        generate.command(served_first, synced, images, folder / "served.json"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=toy,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    served = json.loads((folder / "served.json").read_text())
    assert len(served["token_ids"]) > 0

    model, _, processor = load_policy(synced)
    pictures = [Image.open(path).convert("RGB") for path in images]
    vision = ImageInputs(processor.image_processor, PROCESSOR_KWARGS).encode(pictures)
    merge = processor.image_processor.merge_size**2
    assert (
        served["prompt_token_ids"].count(model.config.image_token_id)
        == int(vision["image_grid_thw"].prod(-1).sum()) // merge
    )
    expected = reference_logprobs(model, served["prompt_token_ids"], served["token_ids"], vision)
    assert torch.allclose(expected, torch.tensor(served["logprobs"]), atol=1e-3), (
        expected,
        served["logprobs"],
    )
