"""``ragym budget gpu-check``: the update step, its peak, time, tokens/s and MFU through the code path a GPU runs,
on CPU with a tiny Qwen2.5-VL config and a stand-in device (its clock, peak and bf16 peak injected), so every
printed figure is checked against hand arithmetic; the refusal on CPU; the committed plans equal the recipes'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ragym.rl.budget import gpu_check
from ragym.rl.budget.gpu_check import GIB, Device, check_all, chunked_log_probs
from ragym.rl.budget.plan import CheckPlan
from ragym.rl.cli import main
from ragym.rl.lora import VISION_TOWER

# A tiny Qwen2.5-VL: text width h, MLP i, L layers, 4 query heads and 2 key/value heads of 8, vocabulary V; a vision
# tower of depth D, width hv, MLP iv (gated), 14 x 14 patches of 2 frames, merged 2 x 2 into out = h.
H, MLP, L, Q, KV, V = 32, 48, 2, 4 * 8, 2 * 8, 256
D, HV, IV, PATCH = 2, 16, 24, 3 * 2 * 14 * 14
TINY = {
    "model_type": "qwen2_5_vl",
    "hidden_size": H,
    "intermediate_size": MLP,
    "num_hidden_layers": L,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": V,
    "max_position_embeddings": 512,
    "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]},
    "tie_word_embeddings": False,
    "bos_token_id": 248,
    "eos_token_id": 249,
    "vision_start_token_id": 250,
    "vision_end_token_id": 251,
    "vision_token_id": 252,
    "image_token_id": 253,
    "video_token_id": 254,
    "vision_config": {
        "depth": D,
        "hidden_size": HV,
        "intermediate_size": IV,
        "num_heads": 2,
        "in_chans": 3,
        "out_hidden_size": H,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "fullatt_block_indexes": [1],
        "hidden_act": "silu",
    },
}
SEQUENCES, SEQ, IMAGES, PER_IMAGE = (
    2,
    40,
    2,
    4,
)  # two episodes of 40 tokens, two 4-token images (16 patches each)
LM = L * (H * Q + 2 * H * KV + Q * H + 3 * H * MLP) + V * H  # q, k, v, o, gate, up, down; the output head
VISION = (
    D * (HV * 3 * HV + HV * HV + 3 * HV * IV) + PATCH * HV + 4 * HV * 4 * HV + 4 * HV * H
)  # blocks, patches, merger
RANK = 4
LORA = (
    RANK * L * ((H + Q) + 2 * (H + KV) + (Q + H) + 2 * (H + MLP) + (MLP + H))
)  # r x (in + out) per adapted layer


def plan(lora: bool, **changes) -> CheckPlan:
    fields = dict(
        recipe="tiny",
        model="",
        config=TINY,
        sequences=SEQUENCES,
        sequence_tokens=SEQ,
        num_images=IMAGES,
        tokens_per_image=PER_IMAGE,
        checkpointing=True,
        freeze_vision_tower=False,
        logprob_path="verl",
        attention="flash_attention_2",
        predicted_gib=2.5,
        scale_note="the recipe's 1 GPU(s)",
        lora={"rank": RANK, "alpha": RANK, "target_modules": "all-linear", "exclude_modules": VISION_TOWER}
        if lora
        else None,
    )
    return CheckPlan(**{**fields, **changes})


def stand_in(peak_flops: float | None = 1e9, memory: float = 100 * GIB) -> Device:
    """A CPU device whose clock reads 0, 2 (first step) then 10, 12.5 (second: 2.5 s) and whose peak is 3 GiB."""
    times = iter([0.0, 2.0, 10.0, 12.5])
    return Device(
        name="test CPU",
        torch_device="cpu",
        memory_bytes=memory,
        peak_flops=peak_flops,
        peak_allocated=lambda: 3 * GIB,
        reset_peak=lambda: None,
        clock=lambda: next(times),
    )


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_printed_figures_are_the_hand_arithmetic(capsys: pytest.CaptureFixture[str], lora: bool) -> None:
    assert check_all([plan(lora)], stand_in()) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| tiny |"))
    tokens, patches = SEQUENCES * SEQ, IMAGES * PER_IMAGE * 4
    attention = 2 * SEQUENCES * SEQ**2 * Q * L  # causal QK^T and AV, forward
    trainable = LORA if lora else LM
    # Forward 2TW + 2PvWv + attention; backward 2TW (inputs) + 2TW_t (weights) + 2 x attention, the tower's 4PvWv
    # only when it trains (LoRA leaves it frozen); W under LoRA includes the adapters.
    lm = LM + (LORA if lora else 0)
    flops = 4 * tokens * lm + 2 * tokens * trainable + 2 * patches * VISION + 3 * attention
    flops += 0 if lora else 4 * patches * VISION
    step_s, mfu = 2.5, flops / 2.5 / 1e9
    expected = (
        f"| tiny | 2.50 | 3.00 | +20.0% | 2.50 | {tokens / step_s:,.0f} | {flops:.3e} | {100 * mfu:.1f}% "
        "| sdpa |"
    )
    assert row == expected
    assert f"{tokens / step_s:,.0f}" == "32"


def test_unknown_peak_and_a_plan_that_does_not_fit_are_one_line_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert check_all([plan(True)], stand_in(peak_flops=None)) == 0
    assert "| n/a (unknown GPU peak) | sdpa |" in capsys.readouterr().out
    assert check_all([plan(True, predicted_gib=200.0)], stand_in()) == 1
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gpu-check: tiny")]
    assert out == [
        "gpu-check: tiny would not fit one GPU of 100.0 GiB: the budget's update is 200.00 GiB on one "
        "GPU (the recipe's 1 GPU(s))"
    ]


def test_the_step_trains_the_adapters_and_not_the_frozen_tower(monkeypatch: pytest.MonkeyPatch) -> None:
    built = {}
    original = gpu_check.build_policy

    def keep(*args, **kwargs):
        built["model"] = (result := original(*args, **kwargs))[1]
        built["before"] = {n: p.detach().clone() for n, p in result[1].named_parameters() if "lora_B" in n}
        return result

    monkeypatch.setattr(gpu_check, "build_policy", keep)
    gpu_check.run_check(plan(True), stand_in())
    named = dict(built["model"].named_parameters())
    assert all(not p.requires_grad for n, p in named.items() if ".visual." in n)
    assert any(not torch.equal(named[n], before) for n, before in built["before"].items())


def test_chunked_log_probs_equal_log_softmax_and_its_gradient() -> None:
    logits = torch.randn(7, 11, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 11, (7,))
    weights = torch.randn(7, dtype=torch.float64)
    (chunked_log_probs(logits, labels, chunk=3) * weights).sum().backward()
    got = logits.grad.clone()
    logits.grad = None
    (torch.log_softmax(logits, -1).gather(-1, labels[:, None]).squeeze(-1) * weights).sum().backward()
    assert torch.allclose(got, logits.grad)


def test_on_cpu_it_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "gpu-check", "--recipe", "kbvqa_qwen2_5_vl_7b_lora_single_gpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torch.cuda.is_available() is False" in err[0]


def test_the_committed_plans_are_the_shipped_recipes(tmp_path: Path) -> None:
    """benchmarks/gpu_check_plans.json (what gpu_check_all.sh runs without verl) equals the recipes' plans now."""
    from ragym.rl.budget.gpu_cli import PLANS_FILE

    out = tmp_path / "plans.json"
    assert main(["budget", "gpu-check", "--all", "--write-plans", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(PLANS_FILE.read_text())
    by_name = {p["recipe"]: p for p in json.loads(out.read_text())}
    single = by_name["kbvqa_qwen2_5_vl_7b_lora_single_gpu"]
    # One episode of 16,384 tokens with 15 images of 1,024 tokens; the budget's LoRA update on one GPU.
    assert (single["sequences"], single["sequence_tokens"], single["num_images"]) == (1, 16384, 15)
    assert single["lora"]["rank"] == 64 and single["predicted_gib"] == pytest.approx(52.50, abs=0.005)
    assert "kbvqa_qwen3_vl_8b" in by_name and "kbvqa_single_gpu_smoke" not in by_name


BARE_MACHINE = """
import importlib.abc, sys
BLOCKED = {"vllm", "verl", "ray", "flash_attn", "omegaconf", "hydra"}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not on the bare GPU machine")
sys.meta_path.insert(0, Refuse())
from ragym.rl.budget import gpu_check
sys.exit(gpu_check.main(["--plans", "benchmarks/gpu_check_plans.json"]))
"""


def test_the_bare_machine_path_imports_only_torch_transformers_and_peft() -> None:
    """``benchmarks/gpu_check_all.sh``'s module runs with vLLM, verl, Ray, flash-attn and omegaconf unimportable: here
    it gets as far as the GPU refusal (one line, status 2)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", BARE_MACHINE], cwd=repo, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "gpu-check: gpu-check measures one update step on a GPU: torch.cuda.is_available() is False here "
        "(`ragym budget memory` gives the arithmetic)"
    ]
