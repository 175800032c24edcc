"""The checkpoint folder's convention both engines and ``ragym export`` read: verl's marker naming the last
complete step."""

from __future__ import annotations

from pathlib import Path

LATEST = "latest_checkpointed_iteration.txt"
"""File in the output folder naming the last complete checkpoint step (verl's convention)."""


def latest_step(output_dir: str | Path) -> int | None:
    """The step ``output_dir``'s marker names, or None where there is no readable marker.

    >>> latest_step("/nonexistent") is None
    True
    """
    try:
        return int((Path(output_dir) / LATEST).read_text().strip())
    except (OSError, ValueError):
        return None
