"""The checkpoint folder's convention both engines and ``ragym export`` read: verl's marker naming the last
complete step; and the files a local-engine step folder must hold to be resumed or exported."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from ragym.rl.errors import UsageError, one_line

LATEST = "latest_checkpointed_iteration.txt"
"""File in the output folder naming the last complete checkpoint step (verl's convention)."""


def latest_step(output_dir: str | Path) -> int | None:
    """The step ``output_dir``'s marker names; None where there is no marker. The one reader of the marker
    (the local engine's resume, ``ragym train --engine verl``'s checks, ``ragym export``).

    A marker that cannot be read, holds no step number, or names a step whose ``global_step_N`` folder is gone is
    a :class:`UsageError` naming the file: the local engine would fail later on a missing file, and verl 0.9.1
    crashes on a marker that is not a number and, for a missing folder, prints one line and trains from step 0
    into the same folder (``find_latest_ckpt_path``).

    >>> latest_step("/nonexistent") is None
    True
    """
    marker = Path(output_dir) / LATEST
    if not marker.exists():
        return None
    try:
        text = marker.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read the latest-checkpoint marker {marker}: {error}") from error
    if not text.isdigit():
        raise UsageError(
            f"the latest-checkpoint marker {marker} should hold the last saved step's number, not {text[:40]!r}: "
            "write the step of the newest complete global_step_N folder into it, or start a new run in another "
            "folder"
        )
    step = int(text)
    folder = Path(output_dir) / f"global_step_{step}"
    if not folder.is_dir():
        raise UsageError(
            f"the latest-checkpoint marker {marker} names step {step}, but {folder} is missing: restore the "
            "folder, write the step of the newest complete global_step_N folder into the marker, or start a new "
            "run in another folder"
        )
    return step


ENGINE_STATE = ("engine_state.pt", "optimizer.pt")
"""A local-engine checkpoint's training state: step, data cursor, random states and recipe; optimizer and scheduler."""
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
"""Either holds a saved image processor."""
TEXT_AND_IMAGE_FILES: tuple[tuple[str, ...], ...] = (
    ("tokenizer.json",),
    ("tokenizer_config.json",),
    PROCESSOR_FILES,
)
"""Beside a model's config and weights: the tokenizer's files and the processor's (one of each tuple)."""


def missing_model_files(folder: str | Path, adapters: bool) -> list[str]:
    """The files a local-engine checkpoint's model lacks (absent, empty, or safetensors weights shorter than their
    header says; none when it is whole): config, weights (every shard an index lists), tokenizer and processor, or
    with ``adapters`` (a peft folder) the adapter weights. A copy cut short or a file removed by hand would otherwise
    fail inside transformers, or export a model that cannot be loaded.

    >>> missing_model_files("/nonexistent", adapters=True)
    ['adapter_model.safetensors']
    """
    folder = Path(folder)
    needed: list[tuple[str, ...]] = [("adapter_model.safetensors",)]
    if not adapters:
        needed = [("config.json",), *[(name,) for name in _weight_files(folder)], *TEXT_AND_IMAGE_FILES]
    missing = []
    for names in needed:
        present = [folder / name for name in names if _whole(folder / name)]
        cut = [problem for path in present if (problem := _cut_short(path)) is not None]
        if not present:
            missing.append(" or ".join(names))
        elif len(cut) == len(present):
            missing.append(f"whole {present[0].name} (cut short: {cut[0]})")
    return missing


def _weight_files(folder: Path) -> list[str]:
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return ["model.safetensors"]
    try:
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [f"{index.name} that lists the weight shards"]


def _whole(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _cut_short(path: Path) -> str | None:
    """How a ``.safetensors`` file falls short of the size its header declares (None when it does not, or for
    another kind of file): a copy cut short keeps its name, and would fail inside transformers, or be exported."""
    if path.suffix != ".safetensors":
        return None
    size = path.stat().st_size
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little") if size >= 8 else 0
        if size < 8 + length or length == 0:
            return f"{size} bytes, inside its header"
        try:
            header = json.loads(file.read(length))
            ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return f"{size} bytes, its header is not a safetensors header"
    expected = 8 + length + max(ends, default=0)
    return f"{size} of {expected} bytes" if size < expected else None


def load_state(path: str | Path) -> Any:
    """A checkpoint's ``torch.save`` file (``engine_state.pt``, ``optimizer.pt``); one that is missing or cannot be
    read (a copy cut short) is a :class:`UsageError` naming it."""
    import torch  # here, not at the top: the marker's readers import this module without torch

    try:
        return torch.load(path, weights_only=False)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise UsageError(
            f"cannot read {path} ({one_line(err).split('. ')[0]}): the checkpoint is damaged; restore the file or "
            "use an earlier global_step_N"
        ) from err
