"""The checkpoint folder's convention both engines and ``ragym export`` read: verl's marker naming the last
complete step."""

from __future__ import annotations

from pathlib import Path

from ragym.rl.errors import UsageError

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
