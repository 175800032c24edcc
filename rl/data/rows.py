"""Load verl parquet rows and validate each one before any work starts; bad rows are listed, then skipped or refused.

Every entry point that runs episodes from rows (``ragym train``, ``ragym eval``, ``ragym rollout``, the demo's
warm start) loads them here, so a row that cannot start an episode is found at load time instead of killing a
run after hours. A row is checked the way its episode starts: the verl columns the agent loop reads, its
``extra_info`` (``env_id``, ``env_kwargs`` and ``env_options`` as JSON objects, ``index``), then its env is
built (once per distinct ``env_kwargs``) and reset with the row's options, which reads its images or document.
A bad row is named by its file, its position in the file (0-based) and its ``extra_info.index``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ragym.rl.errors import UsageError, one_line

logger = logging.getLogger(__name__)

BAD_ROW_POLICIES = ("skip", "refuse")
"""``skip``: list bad rows and run on the rest (the default: one bad row never costs a run); ``refuse``: list
them and stop before any work."""


class DataError(UsageError):
    """Rows that cannot be used: a missing or unreadable file, no valid row, or bad rows under ``refuse``."""


class SharedStateMissing(ValueError):
    """A row whose env shares state across episodes only through a folder its ``env_kwargs`` do not name:
    every episode would start from empty state, so the run is refused (not one row skipped)."""


@dataclass(frozen=True)
class BadRow:
    """One row (or a whole file) that cannot start an episode, and why."""

    file: str
    """The parquet file."""
    position: int | None
    """0-based position of the row in the file; None when the file itself cannot be read."""
    index: Any
    """The row's ``extra_info.index`` (None when it has none)."""
    reason: str
    """What is wrong, one line."""

    def describe(self) -> str:
        """``FILE row P (extra_info.index I): reason``."""
        if self.position is None:
            return f"{self.file}: {self.reason}"
        return f"{self.file} row {self.position} (extra_info.index {self.index}): {self.reason}"


@dataclass
class RowSet:
    """The valid rows of one or more files, in file order, and the bad rows that were left out."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    """Valid rows (pandas records: verl's columns)."""
    positions: list[tuple[str, int]] = field(default_factory=list)
    """(file, position) of each valid row."""
    bad: list[BadRow] = field(default_factory=list)
    """Rows and files left out."""

    def fingerprint(self) -> str:
        """A hash of which rows are used, and their indices: a resumed run refuses data that changed."""
        digest = hashlib.sha256()
        for (file, position), row in zip(self.positions, self.rows, strict=True):
            digest.update(f"{Path(file).name}:{position}:{row['extra_info']['index']}\n".encode())
        return digest.hexdigest()[:16]


def _index(value: Any) -> Any:
    """``extra_info.index`` as written (pandas reads an int column that has nulls as floats)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _json_object(value: Any, name: str) -> dict[str, Any] | None:
    """A JSON-object field of ``extra_info`` (a string, or already decoded) as a dict or None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"{name} is not valid JSON ({err})") from err
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _check_prompt(prompt: Any) -> None:
    """verl's dataset renders ``prompt`` with the chat template: it must be a non-empty list of messages."""
    if prompt is None:
        raise ValueError("prompt is missing")
    # parquet list columns come back from pandas as numpy arrays
    if isinstance(prompt, (str, bytes, dict)) or not isinstance(prompt, (list, tuple, np.ndarray)):
        raise ValueError(
            f"prompt must be a list of chat messages, got {type(prompt).__name__} {str(prompt)[:40]!r}"
        )
    if len(prompt) == 0:
        raise ValueError("prompt is an empty list (no chat message)")
    for message in prompt:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or content is None:
            raise ValueError(f"prompt message {str(message)[:60]!r} is not a {{role, content}} chat message")


class RowChecker:
    """Checks rows as their episodes would start; envs are built once per distinct (env_id, env_kwargs)."""

    IMAGE_CACHE_ROWS = 1024
    """Rows checked between two clears of the decoded-image cache: reading every row's images once must not
    fill the cache (65,536 images) that episodes use."""

    def __init__(self, check_reset: bool = True) -> None:
        self.check_reset = check_reset
        self._envs: dict[str, Any] = {}
        self._num_checked = 0

    def check(self, row: dict[str, Any]) -> None:
        """Raise ValueError (or the env's own error) naming what keeps ``row`` from starting an episode."""
        extra_info = row.get("extra_info")
        if not isinstance(extra_info, dict):
            raise ValueError("extra_info is missing")
        if extra_info.get("index") is None:
            raise ValueError("extra_info.index is missing")
        if not isinstance(row.get("data_source"), str):
            raise ValueError("data_source is missing")
        _check_prompt(row.get("prompt"))
        reward_model = row.get("reward_model")
        if not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None:
            raise ValueError("reward_model.ground_truth is missing")
        if isinstance(reward_model["ground_truth"], str):
            try:
                json.loads(reward_model["ground_truth"])
            except json.JSONDecodeError as err:
                raise ValueError(f"reward_model.ground_truth is not valid JSON ({err})") from err
        # What the agent loop's ``EpisodeSpec.from_extra_info`` reads (without importing verl here).
        missing = [key for key in ("env_id", "env_kwargs", "env_options") if key not in extra_info]
        if missing:
            raise ValueError(f"extra_info lacks {missing}")
        kwargs = _json_object(extra_info["env_kwargs"], "extra_info.env_kwargs")
        options = _json_object(extra_info["env_options"], "extra_info.env_options")
        if kwargs is None:
            raise ValueError("extra_info.env_kwargs must be a JSON object, got null")
        if self.check_reset:
            _check_shared_state(str(extra_info["env_id"]), kwargs)
            self._num_checked += 1
            if self._num_checked % self.IMAGE_CACHE_ROWS == 0:
                from ragym.envs.image_cache import clear_image_cache

                clear_image_cache()
            env = self._env(str(extra_info["env_id"]), kwargs)
            env.reset(seed=int(extra_info["index"]), options=options)

    def _env(self, env_id: str, kwargs: dict[str, Any]) -> Any:
        from ragym import envs

        key = json.dumps([env_id, kwargs], sort_keys=True)
        if key not in self._envs:
            try:
                self._envs[key] = envs.make_env(env_id, **kwargs)
            except Exception as err:  # noqa: BLE001 - every row with these kwargs fails the same way
                self._envs[key] = err
        env = self._envs[key]
        if isinstance(env, Exception):
            raise ValueError(f"env {env_id} with env_kwargs {kwargs} cannot be built: {one_line(env)}")
        return env

    def close(self) -> None:
        """Close the envs built for checking."""
        for env in self._envs.values():
            if not isinstance(env, Exception):
                env.close()
        self._envs.clear()


def _check_shared_state(env_id: str, kwargs: dict[str, Any]) -> None:
    """Refuse rows of an env whose episodes share state through a folder (MEMORA's episodic memory) that the
    row does not name: the agent loop builds one env per episode, so each would start from nothing."""
    from ragym.envs.registry import shared_state_kwarg

    name = shared_state_kwarg(env_id)
    if name is not None and not kwargs.get(name):
        raise SharedStateMissing(
            f"{env_id} rows need env_kwargs.{name}, the folder its episodes share: the agent loop builds one env "
            f"per episode, so without it every episode starts from an empty memory; prepare the rows with "
            f"`ragym prep bright|mm-bright ... --memory-dir DIR`, or set env_kwargs.{name}"
        )


def _read_file(path: str, limit: int) -> list[dict[str, Any]]:
    if Path(path).is_dir():
        raise DataError(
            f"data file {path} is a folder; give the parquet file in it (e.g. {path}/train.parquet)"
        )
    if not Path(path).is_file():
        raise DataError(f"data file {path} not found; check the path (relative paths start at {Path.cwd()})")
    try:
        frame = pd.read_parquet(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise DataError(f"{path} is not a readable parquet file ({one_line(err)})") from err
    rows = frame.to_dict(orient="records")
    return rows if limit < 0 else rows[:limit]


def load_rows(
    paths: str | Sequence[str],
    limit: int = -1,
    on_bad: str = "skip",
    check_reset: bool = True,
) -> RowSet:
    """The valid rows of ``paths`` (the first ``limit`` of each file when ``limit`` >= 0), bad ones reported.

    ``on_bad``: ``skip`` logs every bad row and file and goes on; ``refuse`` raises ``DataError`` listing
    them. No valid row at all is always a ``DataError``. ``check_reset`` also resets each row's env.
    """
    if on_bad not in BAD_ROW_POLICIES:
        raise UsageError(f"bad-row policy {on_bad!r} is not one of {', '.join(BAD_ROW_POLICIES)}")
    files = [paths] if isinstance(paths, str) else list(paths)
    result, checker = RowSet(), RowChecker(check_reset)
    try:
        for path in files:
            try:
                rows = _read_file(str(path), limit)
            except DataError as err:
                if on_bad == "refuse" or len(files) == 1:
                    raise
                result.bad.append(BadRow(str(path), None, None, str(err)))
                continue
            check_rows(((str(path), position, row) for position, row in enumerate(rows)), checker, result)
    finally:
        checker.close()
    report_bad_rows(result, files, on_bad, limit)
    return result


def check_rows(
    located: Iterable[tuple[str, int, dict[str, Any]]], checker: RowChecker, result: RowSet
) -> RowSet:
    """Check each (file, position, row), adding it to ``result``'s valid rows or its bad rows."""
    for file, position, row in located:
        try:
            checker.check(row)
        except SharedStateMissing as err:  # the setting is wrong, not the row: skipping would hide it
            raise DataError(f"{file} row {position}: {err}") from err
        except Exception as err:  # noqa: BLE001 - any failure to start the episode makes the row bad
            index = _index((row.get("extra_info") or {}).get("index"))
            result.bad.append(BadRow(file, position, index, one_line(err)))
            continue
        result.rows.append(row)
        result.positions.append((file, position))
    return result


def report_bad_rows(result: RowSet, files: list[str], on_bad: str, limit: int = -1) -> None:
    """Log every bad row and how many were skipped; raise ``DataError`` under ``refuse`` or with no valid row."""
    for bad in result.bad:
        logger.warning("bad row: %s", bad.describe())
    first = result.bad[0].describe() if result.bad else ""
    if result.bad and on_bad == "refuse":
        raise DataError(
            f"{len(result.bad)} bad row(s) in {', '.join(files)} (first: {first}); fix them, or pass "
            "--bad-rows skip to run on the valid rows"
        )
    if not result.rows and limit != 0:
        raise DataError(
            f"{', '.join(files)}: no valid rows" + (f" (first bad row: {first})" if first else "")
        )
    if result.bad:
        logger.warning(
            "skipping %d bad row(s) of %d in %s",
            len(result.bad),
            len(result.bad) + len(result.rows),
            ", ".join(files),
        )
