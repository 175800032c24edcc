"""verl's latest-checkpoint marker: one reader (``latest_step``) for the local engine's resume, ``ragym export`` and
``ragym train --engine verl``, and a broken marker refused by each with the same message."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ragym.rl.core.checkpoints import LATEST, latest_step
from ragym.rl.engine.resume import resume_point
from ragym.rl.errors import UsageError
from ragym.rl.export import inspect_checkpoint
from ragym.rl.verl_plugin import verl_local

BROKEN = [
    ("two\n", "should hold the last saved step's number, not 'two'"),
    ("-1", "should hold the last saved step's number"),
    ("", "should hold the last saved step's number, not ''"),
    ("3", r"names step 3, but .*global_step_3 is missing"),
]
"""A marker's text (the run holds global_step_1 and _2) and what the refusal says."""


def run_folder(root: Path, marker: str | None) -> Path:
    for step in (1, 2):
        (root / f"global_step_{step}").mkdir(parents=True)
    if marker is not None:
        (root / LATEST).write_text(marker)
    return root


def test_the_marker_names_a_saved_step_or_there_is_none(tmp_path: Path) -> None:
    assert latest_step(run_folder(tmp_path / "none", None)) is None
    assert latest_step(run_folder(tmp_path / "two", "2\n")) == 2


@pytest.mark.parametrize(("text", "message"), BROKEN)
def test_every_reader_refuses_a_broken_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    run = run_folder(tmp_path / "run", text)
    with pytest.raises(UsageError, match=message):
        latest_step(run)
    with pytest.raises(UsageError, match=message):
        resume_point(str(run), "auto", None)  # the local engine's resume
    with pytest.raises(UsageError, match=message):
        inspect_checkpoint(run)  # ragym export / eval of a run folder
    started = []

    def trainer(command: list[str], env: dict[str, str], check: bool) -> subprocess.CompletedProcess:
        started.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(verl_local.subprocess, "run", trainer)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for mode, refused in (("auto", True), ("disable", False)):
        config = OmegaConf.create({"trainer": {"default_local_dir": str(run), "resume_mode": mode}})
        monkeypatch.setattr(
            verl_local,
            "verl_command",
            lambda *a, config=config: (["python", "-m", "verl.trainer.main_ppo"], config),
        )
        if refused:  # verl would crash on it, or train from step 0 over the run
            with pytest.raises(UsageError, match=message):
                verl_local.run_verl("kbvqa_tiny_cpu", [], network="host")
            assert not started
        else:  # verl starts over and ignores the marker
            assert verl_local.run_verl("kbvqa_tiny_cpu", [], network="host") == 0
            assert len(started) == 1


def _model_folder(folder: Path) -> Path:
    """A folder with every file a full local-engine checkpoint's model needs, the weights a real safetensors file."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "processor_config.json"):
        (folder / name).write_text("{}")
    save_file({"w": torch.arange(64, dtype=torch.float32)}, folder / "model.safetensors")
    return folder


@pytest.mark.parametrize(
    ("kept", "missing"),
    [
        (328, []),  # whole: the 8-byte length, a 64-byte header, 64 float32 values
        (327, ["whole model.safetensors (cut short: 327 of 328 bytes)"]),  # its last byte lost
        (60, ["whole model.safetensors (cut short: 60 bytes, inside its header)"]),
        (5, ["whole model.safetensors (cut short: 5 bytes, inside its header)"]),
        (0, ["model.safetensors"]),  # empty
    ],
)
def test_weights_cut_short_count_as_missing(tmp_path: Path, kept: int, missing: list[str]) -> None:
    """A copy cut short (disk full, a killed ``cp``) keeps the file's name: its header says how long it must be."""
    from ragym.rl.core.checkpoints import missing_model_files

    weights = _model_folder(tmp_path / "step") / "model.safetensors"
    data = weights.read_bytes()
    assert len(data) == 328
    weights.write_bytes(data[:kept])
    assert missing_model_files(tmp_path / "step", adapters=False) == missing
