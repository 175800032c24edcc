"""verl's own trainer (``main_ppo``), for real, on every environment: ``ragym train --engine verl --toy``.

Each run is the cluster path on CPU through ragym's plugin: verl's v1 trainer with TransferQueue, its data
pipeline and agent-loop workers, ragym's agent loop, env and reward recipe, FSDP2 on gloo, the hf or vLLM rollout
with weights synced every step, checkpoints and the recipe snapshot. The policy is a tiny one warm-started on a
scripted expert, so rewards differ within a group and the gradient is not zero. Then: ragym's metrics and trace are
there, ``ragym export`` reads the checkpoint and ``ragym eval`` runs the export. This file holds what those runs
check and the GPU smoke script's CPU run (verl's legacy trainer); the runs themselves are one per env, trainer mode
and LoRA mode (``VERL_RUN_OF_ENV``). Everything runs inside a private network namespace: runs join their file's Ray
instance in its namespace (``ray_head``, ``tests/launch/conftest.py``), which can only listen on loopback and dies
with the module; ``--network private`` (a namespace and a Ray of the run's own) is the vLLM, new-env,
planted-fault and GPU-smoke runs'.

One verl run costs about 2-3 min of CPU, most of it start-ups (``tests/launch/budget.md``), so a run carries every
check it can: an env's run is also a trainer mode's or a rollout's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ragym.envs.hooks import env_hooks, one_env_per_hooks
from ragym.rl.core.metrics import METRICS_FILE, metrics_by_step
from ragym.rl.guards import MISMATCH_BOUND
from ragym.rl.verl_plugin.verl_local import console_step_metrics
from tests.launch.conftest import RayHead

pytestmark = pytest.mark.ray

RUN_TIMEOUT_S = 1500
"""Longest a ``ragym`` command may take, a hang guard: a two-step run takes about 1.5 min on 2 idle cores, but
``make test`` runs two verl runs side by side and CI machines are shared (the LoRA run passed 900 s beside the
other worker's run and three other jobs' training, load ~10)."""
ON_VLLM = {"R3G-v0": "r3g_qwen2_5_vl_7b"}
"""The envs whose 2-step sync run is on the vLLM rollout (``tests/launch/test_verl_vllm.py``, with this file's
checks, export and eval): R3G's only rollout is vLLM. KB-VQA's paper recipe on vLLM is its LoRA run there."""
VERL_RUN_OF_ENV = {
    "KBVQA-v0": "sync full weights with a KL reference on a Ray cluster (test_ray_job.py), LoRA in each trainer mode "
    "(test_verl_lora.py, test_verl_lora_async.py) and on vLLM (test_verl_vllm.py), the GPU smoke script (below)",
    "R3G-v0": "sync on vLLM, export and eval (test_verl_vllm.py)",
    "DocMemo-v0": "colocate_async, resumed, export and eval (test_verl_async.py)",
    "MEMORA-v0": "separate_async, export and eval (test_verl_async.py)",
}
"""Where each env with a paper recipe (``EnvHooks.paper_recipe``; one env per hooks: KB-VQA's demo env shares
KB-VQA's) runs on verl's trainer, each env's run also a trainer mode's, a LoRA mode's or a rollout's."""
PROBS_DIFF_BOUND = 0.01
"""Largest ``training/rollout_probs_diff_mean`` (mean |p_rollout - p_trainer| over response tokens) a toy step may
show, for either rollout: the hf and the vLLM rollout measure about 0.002 (float32 on both sides), while a vLLM
rollout with wrong image features measured 0.06-0.11 (docs/training.md, vLLM on CPU)."""
CORRECTION_KEYS = {
    "off_policy/mismatch_kl",
    "off_policy/is_ratio_p50",
    "off_policy/is_ratio_p99",
    "off_policy/is_clipped_share",
}
"""The off-policy correction's metrics (``ragym.rl.correction``), logged at every step of every mode."""


def ragym(*args: str, cwd: Path, timeout: float = RUN_TIMEOUT_S, head: RayHead | None = None) -> str:
    """Run ``ragym ARGS`` from ``cwd`` (not the repository: commands must work from any folder), inside ``head``'s
    network namespace and joining it where one is given."""
    command = [sys.executable, "-m", "ragym.rl.cli", *args]
    env = {**os.environ, **head.env} if head else None
    done = subprocess.run(
        head.command(command) if head else command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"ragym {' '.join(args[:4])} failed ({done.returncode}):\n{log[-6000:]}"
    return log


def train(
    recipe: str, toy: Path, *overrides: str, head: RayHead | None = None
) -> dict[int, dict[str, float]]:
    """``ragym train --engine verl --toy`` in a private network namespace: joining ``head`` (the test file's Ray
    instance, in its namespace) where given, else one of its own with its own Ray (``--network private``)."""
    network = "host" if head else "private"  # host: the head's namespace, whose only network is loopback
    (out,) = [Path(o.split("=", 1)[1]) for o in overrides if o.startswith("trainer.default_local_dir=")]
    before = metrics_lines(out)
    log = ragym(
        "train",
        "--engine",
        "verl",
        "--recipe",
        recipe,
        "--toy",
        str(toy),
        "--network",
        network,
        *overrides,
        cwd=toy,
        head=head,
    )
    return logged_steps(out, before, log)


def metrics_lines(out: Path) -> set[str]:
    """The lines of the run folder's ``metrics.jsonl`` (none before its first run)."""
    path = out / METRICS_FILE
    return set(path.read_text().splitlines()) if path.is_file() else set()


def logged_steps(out: Path, before: set[str], log: str) -> dict[int, dict[str, float]]:
    """The steps a run logged to ``out/metrics.jsonl`` (its lines not in ``before``), a step's rows merged; verl's
    console showed the same steps (its lines may arrive split through Ray: the file is what the checks read)."""
    lines = (out / METRICS_FILE).read_text().splitlines()
    steps = metrics_by_step(json.loads(line) for line in lines if line.strip() and line not in before)
    assert sorted(steps) == sorted(console_step_metrics(log)), log[-4000:]
    return steps


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


def export_and_eval(toy: Path, checkpoints: Path, name: str, env_id: str) -> None:
    """``ragym export`` of the run in ``checkpoints`` to ``toy/export/name`` (its weights differ from the toy
    policy's), then ``ragym eval`` of the export on 4 held-out rows into ``toy/eval/name``."""
    export = toy / "export" / name
    ragym("export", str(checkpoints), "--out", str(export), cwd=toy)
    before, after = weights(toy / "policy" / env_id), weights(export)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before), "GRPO changed no weight"
    ragym(
        "eval",
        "--model",
        str(export),
        "--data",
        str(toy / env_id / "data" / "test.parquet"),
        "--out",
        str(toy / "eval" / name),
        "--limit",
        "4",
        cwd=toy,
    )
    assert (toy / "eval" / name / "metrics.json").is_file()


def check_two_sync_steps(
    metrics: dict[int, dict[str, float]], toy: Path, checkpoints: Path, env_id: str, rollout: str = "hf"
) -> None:
    """What every 2-step run of the sync trainer mode must show, either rollout: GRPO had a gradient, the rollout
    served the trainer's weights, ragym's metrics and the off-policy correction's are in the stream, and the run's
    files (``check_run_files``)."""
    assert sorted(metrics) == [1, 2], f"steps seen: {sorted(metrics)}"
    # The warm start makes rewards differ within groups, so GRPO has a non-zero gradient to follow.
    assert any(m["critic/score/max"] > m["critic/score/min"] for m in metrics.values()), metrics
    assert any(m["actor/grad_norm"] > 0 for m in metrics.values()), metrics
    # Every trajectory was generated by the weights of the step before (the rollout got them each step)...
    assert all(m["training/off_policy/trajectory_staleness/max"] == 0 for m in metrics.values())
    # ... and the rollout's log-probs of its own samples are the trainer's.
    assert all(m["training/rollout_probs_diff_mean"] < PROBS_DIFF_BOUND for m in metrics.values()), metrics
    # The ragym trainer mode adds the rubric's terms and the episode metrics to verl's own.
    for m in metrics.values():
        assert {"reward/total", "episode/turns", "grpo/zero_adv_group_share", *CORRECTION_KEYS} <= m.keys(), (
            sorted(m)
        )
        # A sync hf rollout is on-policy: the correction is off (auto); the vLLM recipes switch it on (on GPUs
        # vLLM's kernels are not the trainer's). Either way the mismatch is far below the run check's bound.
        assert ("rollout_corr/rollout_is_mean" in m) == (rollout == "vllm"), sorted(m)
        assert m["off_policy/mismatch_kl"] < MISMATCH_BOUND / 10, m
        assert m["reward/total"] == pytest.approx(m["critic/score/mean"], abs=1e-5)
    check_run_files(toy, checkpoints, env_id, [1, 2])


def check_run_files(toy: Path, checkpoints: Path, env_id: str, steps: list[int]) -> list[dict]:
    """A run's files, any trainer mode: a checkpoint and the recipe snapshot at every step, a trace of ``env_id``'s
    episodes at every step with an advantage per response token, which opens in ``ragym view``; returns the trace's
    records."""
    for step in steps:
        assert (checkpoints / f"global_step_{step}" / "actor").is_dir()
        assert json.loads((checkpoints / f"global_step_{step}" / "ragym_recipe.json").read_text())
    traces = checkpoints / "traces"
    recorded = [json.loads(line) for line in (traces / "episodes.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in recorded}) == steps and all(r["env_id"] == env_id for r in recorded)
    assert all(len(r["advantages"]) == len(r["response_ids"]) == len(r["response_mask"]) for r in recorded)
    ragym("view", str(traces), "--export", str(toy / "view" / checkpoints.name), cwd=toy)
    return recorded


def test_every_env_with_a_paper_recipe_has_a_verl_run() -> None:
    """A new env with a paper recipe gets a verl run (one that also checks a mode or a rollout) or fails here."""
    assert set(one_env_per_hooks("paper_recipe")) == VERL_RUN_OF_ENV.keys()
    assert all(env_hooks(env_id).paper_recipe for env_id in VERL_RUN_OF_ENV)


def test_gpu_smoke_script_on_cpu_on_the_legacy_trainer(toy: Path) -> None:
    """``bash launch/gpu_smoke.sh --cpu --rollout hf trainer.use_v1=false``: the GPU smoke script's run without vLLM
    (2 GRPO steps of the smoke recipe at toy size, export, eval), through ragym's CPU plugin; on a GPU ``--rollout
    hf`` runs the same with FSDP on NCCL (recipes/platforms/gpu_hf.yaml). The script passes its extra arguments to
    ``ragym train``: this run also takes verl's legacy trainer (``use_v1=false``), whose checkpoint exports and
    evaluates like the v1 trainer's. KB-VQA's toy rows and warm start are the session's."""
    done = subprocess.run(
        [
            "bash",
            str(Path(__file__).resolve().parents[2] / "launch" / "gpu_smoke.sh"),
            "--cpu",
            "--rollout",
            "hf",
            "trainer.use_v1=false",
        ],
        env={**os.environ, "RAGYM_SMOKE_DIR": str(toy), "RAGYM_VENV": sys.prefix},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    metrics = console_step_metrics(log)
    assert sorted(metrics) == [1, 2] and any(m["actor/grad_norm"] > 0 for m in metrics.values()), metrics
    assert (toy / "checkpoints" / "kbvqa_single_gpu_smoke" / "global_step_2" / "actor").is_dir()
    assert (toy / "export" / "kbvqa_single_gpu_smoke" / "README.md").is_file()
    assert (toy / "eval" / "kbvqa_single_gpu_smoke" / "metrics.md").is_file()
