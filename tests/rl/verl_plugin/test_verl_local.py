"""``ragym train --engine verl``'s process set-up: what the trainer's environment carries (no trainer runs here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ragym.rl.verl_plugin import verl_local

OWN_RAY = {verl_local.WORKER_NICENESS_ENV: "0", **verl_local.NO_PRESTART}
"""What ``run_verl`` gives a Ray instance the trainer starts itself: its workers at the trainer's own priority (at
Ray's default niceness, 15, every busy process on the machine starved them: a one-step toy run beside two CPU-bound
processes took 21 min against 4 at niceness 0), and no idle workers started ahead of need."""


@pytest.mark.parametrize(
    ("ray_address", "preset", "expected"),
    [
        (None, None, OWN_RAY),  # a Ray instance the trainer starts
        (None, "7", dict.fromkeys(OWN_RAY, "7")),  # the user's values win
        (
            "127.0.0.1:6379",
            None,
            dict.fromkeys(OWN_RAY),
        ),  # joining a cluster: its raylet runs already, nothing set
    ],
)
def test_the_trainers_own_ray_gets_ragyms_worker_settings(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ray_address: str | None,
    preset: str | None,
    expected: dict[str, str | None],
) -> None:
    config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)}})
    monkeypatch.setattr(
        verl_local, "verl_command", lambda *a: (["python", "-m", "verl.trainer.main_ppo"], config)
    )
    for name, value in {"RAY_ADDRESS": ray_address, **dict.fromkeys(OWN_RAY, preset)}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    seen: dict[str, str] = {}

    def trainer(command: list[str], env: dict[str, str], check: bool) -> subprocess.CompletedProcess:
        seen.update(env)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(verl_local.subprocess, "run", trainer)
    assert verl_local.run_verl("kbvqa_tiny_cpu", [], network="host") == 0
    assert {name: seen.get(name) for name in OWN_RAY} == expected


SEPARATE = "trainer.v1.trainer_mode=ragym_separate_async"
SIZES = [
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "trainer.v1.separate_async.parameter_sync_step=1",
    "trainer.v1.sampler.max_off_policy_threshold=2",
]


def test_separate_async_is_one_line_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without a GPU the command adds the mode's rollout pool and weight sync (the recipe check
    refuses the mode without them); other modes get none of it, and the user's own value wins."""
    from ragym.rl.recipe.platforms import platform_overrides

    monkeypatch.setattr(verl_local, "gpu_present", lambda: False)
    added = platform_overrides("cpu_separate_async")
    command, config = verl_local.verl_command("kbvqa_qwen2_5_vl_7b", [SEPARATE, *SIZES], None)
    assert set(added) <= set(command)
    assert config.actor_rollout_ref.rollout.n_gpus_per_node == 1
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "ragym_object_store"

    colocate = "trainer.v1.trainer_mode=ragym_colocate_async"
    command, _ = verl_local.verl_command("kbvqa_qwen2_5_vl_7b", [colocate, *SIZES], None)
    assert not set(added) & set(command)

    mine = "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"
    command, config = verl_local.verl_command("kbvqa_qwen2_5_vl_7b", [SEPARATE, *SIZES, mine], None)
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"


@pytest.mark.parametrize(("rollout", "name"), [(None, "vllm"), ("vllm", "vllm"), ("hf", "hf")])
def test_a_gpu_run_takes_the_recipes_rollout_or_the_hf_one(
    monkeypatch: pytest.MonkeyPatch, rollout: str | None, name: str
) -> None:
    """With a GPU, the recipe runs as written (vLLM, flash-attn) unless ``--rollout hf`` asks for the run without
    vLLM: recipes/platforms/gpu_hf.yaml, and none of the CPU platform (FSDP and NCCL stay)."""
    from ragym.rl.recipe.platforms import platform_overrides

    monkeypatch.setattr(verl_local, "gpu_present", lambda: True)
    command, config = verl_local.verl_command("kbvqa_qwen2_5_vl_7b", [], None, rollout)
    rollout_section = config.actor_rollout_ref
    assert rollout_section.rollout.name == name
    assert config.actor_rollout_ref.actor.strategy == "fsdp"  # not the CPU platform's fsdp2 on gloo
    hf = set(platform_overrides("gpu_hf"))
    assert hf <= set(command) if rollout == "hf" else not hf & set(command)
    if rollout == "hf":
        assert not rollout_section.model.use_remove_padding
        assert rollout_section.model.override_config.attn_implementation == "sdpa"


@pytest.mark.parametrize(
    ("trained", "steps", "raises"),
    [
        (False, 3, True),  # resumed at 2 of 3, its data used up: verl's exit 0 with no step
        (True, 3, False),  # resumed at 2 and wrote step 3
        (False, 2, False),  # already at its last step: nothing to train
    ],
)
def test_a_resumed_run_that_trains_no_step_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trained: bool, steps: int, raises: bool
) -> None:
    """verl 0.9.1 resumed DocMemo's 6-row toy set at step 2 of 3 and exited 0 with no step (the recipes' 2 epochs held
    2 batches): the command says so instead of succeeding."""
    from ragym.rl.core.checkpoints import LATEST
    from ragym.rl.errors import UsageError

    latest = tmp_path / LATEST
    (tmp_path / "global_step_2").mkdir()
    latest.write_text("2")
    trainer = {"default_local_dir": str(tmp_path), "total_training_steps": steps, "save_freq": 1}
    config = OmegaConf.create({"trainer": {**trainer, "resume_mode": "auto", "total_epochs": 2}})
    monkeypatch.setattr(
        verl_local, "verl_command", lambda *a: (["python", "-m", "verl.trainer.main_ppo"], config)
    )
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def run(command: list[str], env: dict[str, str], check: bool) -> subprocess.CompletedProcess:
        if trained:
            (tmp_path / "global_step_3").mkdir()
            latest.write_text("3")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(verl_local.subprocess, "run", run)
    if raises:
        with pytest.raises(
            UsageError, match=r"resumed from step 2 of 3 and trained no step: .*total_epochs 2"
        ):
            verl_local.run_verl("kbvqa_tiny_cpu", [], network="host")
    else:
        assert verl_local.run_verl("kbvqa_tiny_cpu", [], network="host") == 0
