"""``ragym export``: verl FSDP and local-engine checkpoints round-trip into Hugging Face model folders."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText

from ragym.rl.errors import UsageError
from ragym.rl.export import RECIPE_SNAPSHOT, RecipeSnapshot, export_checkpoint, inspect_checkpoint
from ragym.rl.models import load_policy, load_processor
from ragym.rl.recipe.compose import RECIPES_DIR, load_recipe
from tests.rl.fsdp_checkpoint import SCALE

REPO = RECIPES_DIR.parent
HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "README.md")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _assert_same_weights(exported: Path, expected: dict[str, torch.Tensor]) -> None:
    model = AutoModelForImageTextToText.from_pretrained(exported, dtype=torch.float32)
    got = model.state_dict()
    assert set(expected) <= set(got), sorted(set(expected) - set(got))
    for name, tensor in expected.items():
        torch.testing.assert_close(
            got[name], tensor.float(), rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.fixture(scope="module")
def verl_checkpoint(tiny_policy_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-rank FSDP2 checkpoint written by verl's FSDPCheckpointManager, plus the recipe snapshot."""
    run = tmp_path_factory.mktemp("verl_run")
    policy = tiny_policy_dir("qwen2_5_vl")
    result = subprocess.run(
        [sys.executable, "-m", "tests.rl.fsdp_checkpoint", str(policy), str(run), str(_free_port())],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    config = load_recipe("kbvqa_single_gpu_smoke", [f"actor_rollout_ref.model.path={policy}"])
    RecipeSnapshot(config).on_save(trainer=None, global_step=1, checkpoint_dir=str(run / "global_step_1"))
    (run / "latest_checkpointed_iteration.txt").write_text("1")
    return run


def test_verl_fsdp_checkpoint_round_trips_weight_by_weight(
    verl_checkpoint: Path, tiny_policy_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    out = export_checkpoint(verl_checkpoint, tmp_path / "hf")  # the run folder: newest step via the marker
    original, _, _ = load_policy(tiny_policy_dir("qwen2_5_vl"))
    # verl's merger writes bf16, so the reference is the scaled original in bf16.
    expected = {name: (tensor * SCALE).to(torch.bfloat16) for name, tensor in original.state_dict().items()}
    _assert_same_weights(out, expected)
    assert all((out / name).is_file() for name in HF_FILES)
    assert load_processor(out).image_processor is not None
    meta = json.loads((out / "ragym_export.json").read_text())
    assert (meta["kind"], meta["step"], meta["recipe_name"]) == ("verl_fsdp", 1, "kbvqa_single_gpu_smoke")
    assert meta["recipe"]["actor_rollout_ref"]["rollout"]["n"] == 4
    card = (out / "README.md").read_text()
    assert "| step | 1 |" in card and "kbvqa_single_gpu_smoke" in card and "mmagent_r2.yaml" in card


def test_local_engine_checkpoint_round_trips_weight_by_weight(
    tiny_policy_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    from ragym.data_prep.synthetic_kb import main as build_kb
    from ragym.rl.train import main as train

    assert build_kb(["--out", str(tmp_path / "kb"), "--preset", "tiny"]) == 0
    run = tmp_path / "grpo"
    assert (
        train(
            [
                "--recipe",
                "kbvqa_tiny_cpu",
                f"data.train_files={tmp_path}/kb/data/train.parquet",
                f"data.val_files={tmp_path}/kb/data/test.parquet",
                f"actor_rollout_ref.model.path={tiny_policy_dir('qwen2_5_vl')}",
                f"trainer.default_local_dir={run}",
                "trainer.total_training_steps=1",
                "trainer.logger=[console]",
                "data.train_batch_size=2",
                "actor_rollout_ref.rollout.n=2",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "data.max_response_length=64",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
                "ragym.engine.batch_wait_s=0.2",
            ]
        )
        == 0
    )
    step_dir = run / "global_step_1"
    out = export_checkpoint(step_dir, tmp_path / "hf")
    trained = AutoModelForImageTextToText.from_pretrained(step_dir, dtype=torch.float32).state_dict()
    _assert_same_weights(out, trained)
    assert set(load_file(out / "model.safetensors")) == set(load_file(step_dir / "model.safetensors"))
    assert all((out / name).is_file() for name in HF_FILES)
    assert not (out / "engine_state.pt").exists() and not (out / "optimizer.pt").exists()
    meta = json.loads((out / "ragym_export.json").read_text())
    assert (meta["kind"], meta["step"], meta["recipe_name"]) == ("local", 1, "kbvqa_tiny_cpu")
    load_policy(out)  # loads like any policy


def test_recipe_snapshot_writes_the_resolved_recipe(tmp_path: Path) -> None:
    config = OmegaConf.create({"a": 1, "b": "${a}"})
    RecipeSnapshot(config).on_save(trainer=None, global_step=3, checkpoint_dir=str(tmp_path))
    assert json.loads((tmp_path / RECIPE_SNAPSHOT).read_text()) == {"a": 1, "b": 1}


def test_what_is_not_a_checkpoint_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"not a verl FSDP checkpoint.*notes\.txt"):
        inspect_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="not a folder"):
        inspect_checkpoint(tmp_path / "missing")


def test_refuses_to_overwrite(verl_checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(UsageError, match="not empty"):
        export_checkpoint(verl_checkpoint, tmp_path)


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("model_world_size_2_rank_1.pt", r"whole model_world_size_2_rank_1\.pt \(cut short\)"),
        ("huggingface/tokenizer.json", r"huggingface/tokenizer\.json"),
        ("fsdp_config.json", r"fsdp_config\.json that names the world size"),
    ],
)
def test_an_incomplete_verl_checkpoint_is_named_before_anything_is_written(
    verl_checkpoint: Path, tmp_path: Path, damage: str, named: str
) -> None:
    """A rank's shard cut short (a copy that ran out of disk) failed inside torch.load with a traceback, and a
    tokenizer lost from ``huggingface/`` inside transformers."""
    run = tmp_path / "run"
    shutil.copytree(verl_checkpoint, run)
    damaged = run / "global_step_1" / "actor" / damage
    if damage.endswith(".pt"):
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    elif damage == "fsdp_config.json":
        damaged.write_text('{"FSDP_version": 2}')
    else:
        damaged.unlink()
    with pytest.raises(UsageError, match=rf"actor is incomplete, it has no {named}: "):
        export_checkpoint(run, tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("lost", ["model.safetensors", "tokenizer.json", "engine_state.pt"])
def test_an_incomplete_local_checkpoint_is_named_before_anything_is_written(
    tiny_policy_dir: Callable[[str], Path], tmp_path: Path, lost: str
) -> None:
    step_dir = tmp_path / "run" / "global_step_1"
    shutil.copytree(tiny_policy_dir("qwen2_5_vl"), step_dir)
    torch.save({"step": 1, "config": "{}"}, step_dir / "engine_state.pt")
    damaged = lost == "engine_state.pt"  # the state's absence makes no local checkpoint: cut it short instead
    if damaged:
        (step_dir / lost).write_bytes((step_dir / lost).read_bytes()[:100])
    else:
        (step_dir / lost).unlink()
    expected = (
        r"cannot read .*engine_state\.pt" if damaged else rf"global_step_1 is incomplete, it has no {lost}"
    )
    with pytest.raises(UsageError, match=expected):
        export_checkpoint(step_dir, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_weights_cut_short_are_named_before_anything_is_written(
    tiny_policy_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """A copy of the checkpoint that ran out of disk keeps the file's name; exported, it would fail at load."""
    step_dir = tmp_path / "run" / "global_step_1"
    shutil.copytree(tiny_policy_dir("qwen2_5_vl"), step_dir)
    torch.save({"step": 1, "config": "{}"}, step_dir / "engine_state.pt")
    weights = step_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(
        UsageError, match=r"it has no whole model\.safetensors \(cut short: \d+ of \d+ bytes\)"
    ):
        export_checkpoint(step_dir, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def _local_checkpoint(policy: Path, step_dir: Path) -> Path:
    """``policy`` as a local-engine ``global_step_1`` folder (its engine state a stand-in)."""
    shutil.copytree(policy, step_dir)
    torch.save({"step": 1, "config": "{}"}, step_dir / "engine_state.pt")
    return step_dir


def test_a_write_that_fails_midway_leaves_no_folder_that_loads_as_whole(
    tiny_policy_dir: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills up while the weights are copied: one line names the failure, and ``--out`` is not a model
    folder with some of its files (nor are half-written folders left beside it); the same command then works."""
    import errno

    import ragym.rl.export as export

    step_dir = _local_checkpoint(tiny_policy_dir("qwen2_5_vl"), tmp_path / "run" / "global_step_1")
    copy = shutil.copy2

    def disk_full(source: Path, target: Path) -> None:
        if Path(source).name == "tokenizer.json":  # after the config and weights, in name order
            Path(target).write_bytes(Path(source).read_bytes()[:10])
            raise OSError(errno.ENOSPC, "No space left on device")
        copy(source, target)

    monkeypatch.setattr(export.shutil, "copy2", disk_full)
    with pytest.raises(UsageError, match=r"nothing was written there.*No space left on device"):
        export_checkpoint(step_dir, tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    monkeypatch.setattr(export.shutil, "copy2", copy)
    out = export_checkpoint(step_dir, tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]
    (tmp_path / "plain").mkdir()
    assert out.stat().st_mode == (tmp_path / "plain").stat().st_mode  # readable as any folder the user makes
    load_policy(out)


def _lora_checkpoint(base: Path, step_dir: Path) -> Path:
    """A local-engine LoRA ``global_step_1`` folder: peft's adapter files naming ``base``, and a stand-in state."""
    from peft import LoraConfig, get_peft_model

    from ragym.rl.lora import VISION_TOWER

    model, _, _ = load_policy(base)
    config = LoraConfig(
        r=4, target_modules="all-linear", exclude_modules=VISION_TOWER, base_model_name_or_path=str(base)
    )
    get_peft_model(model, config).save_pretrained(str(step_dir), safe_serialization=True)
    torch.save({"step": 1, "config": "{}"}, step_dir / "engine_state.pt")
    return step_dir


@pytest.mark.parametrize("merge", [False, True])
def test_adapters_whose_base_moved_are_refused_naming_the_checkpoint(
    tiny_policy_dir: Callable[[str], Path], tmp_path: Path, merge: bool
) -> None:
    """The adapter folder would not load (nor merge) without its base: the error names the checkpoint whose
    ``adapter_config.json`` names it, and ``--out`` is not left holding adapters that cannot load."""
    base = tmp_path / "policy"
    shutil.copytree(tiny_policy_dir("qwen2_5_vl"), base)
    step_dir = _lora_checkpoint(base, tmp_path / "run" / "global_step_1")
    base.rename(tmp_path / "policy_moved")
    message = rf"{step_dir}: its base model '{base}' is neither a folder"
    with pytest.raises(UsageError, match=message):
        export_checkpoint(step_dir, tmp_path / "hf", merge=merge)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy_moved", "run"]


def test_a_verl_lora_base_that_does_not_resolve_names_the_checkpoint(tmp_path: Path) -> None:
    """verl's adapters get their base from the recipe snapshot: the error names the actor folder and the ways out,
    not the hidden folder the export is written into."""
    from ragym.rl.export import _check_verl_base

    adapter = tmp_path / ".hf.0123abcd.partial" / "lora_adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(tmp_path / "gone")})
    )
    actor = tmp_path / "global_step_2" / "actor"
    with pytest.raises(
        UsageError, match=rf"^{actor}: its recipe's base model '{tmp_path}/gone' .*--recipe"
    ) as err:
        _check_verl_base(adapter, actor)
    assert ".partial" not in str(err.value)


def test_a_recipe_snapshot_cut_short_counts_as_none_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    step_dir = tmp_path / "global_step_3"
    (step_dir / "actor").mkdir(parents=True)
    (step_dir / "actor" / "fsdp_config.json").write_text("{}")
    (step_dir / RECIPE_SNAPSHOT).write_text('{"trainer": {"experiment_na')
    found = inspect_checkpoint(step_dir)
    assert (found.kind, found.step, found.recipe) == ("verl_fsdp", 3, None)
    assert f"{RECIPE_SNAPSHOT} is not JSON" in caplog.text
