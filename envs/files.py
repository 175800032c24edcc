"""The two file helpers every layer shares: a write that is whole or absent, and a JSON-lines reader.

They sit in the envs core because it is the lowest layer that needs them (environment stores and corpora are
JSON lines; the image pack is written atomically); data preparation, rewards and rl import them from here.
Retrieval (``envs/retrieval``) needs neither and imports nothing outside itself.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import shutil
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

T = TypeVar("T")

logger = logging.getLogger(__name__)


class JsonlError(ValueError):
    """A line of a JSON-lines file that is not JSON (or not UTF-8); the message starts with ``path:line``."""

    def __init__(self, path: Path, line_number: int, error: ValueError) -> None:
        super().__init__(f"{path}:{line_number}: not JSON ({error})")
        self.path, self.line_number = path, line_number


def read_jsonl(path: str | Path, *, yield_broken: bool = False) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of a ``.jsonl`` (or gzipped ``.jsonl.gz``) file, lazily.

    A line that is not JSON (or not UTF-8) raises ``JsonlError`` naming the file and line; with ``yield_broken`` that error is
    yielded in place of the value and reading goes on (a data preparation counts it as a rejected row). A gzip file
    cut short ends with one such error, after the lines before the cut. A UTF-8 BOM opening the file is skipped.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> _ = path.write_text('{"a": 1}\\n\\n[2]\\n')
    >>> list(read_jsonl(path))
    [(1, {'a': 1}), (3, [2])]
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as lines:
        yield from _parse_lines(path, lines, yield_broken)


def _lines(lines: Iterable[bytes]) -> Iterator[bytes | ValueError]:
    """The file's lines; a gzip stream cut short (a download that stopped) ends them with its error."""
    try:
        yield from lines
    except (
        EOFError,
        gzip.BadGzipFile,
        zlib.error,
    ) as err:  # gzip: no end-of-stream marker, a bad header or block
        yield ValueError(f"the file is cut short or not gzip ({err})")


def _parse_lines(path: Path, lines: Iterable[bytes], yield_broken: bool) -> Iterator[tuple[int, Any]]:
    # Bytes, decoded line by line: one line that is not UTF-8 is one broken line, not the end of the file.
    for number, raw in enumerate(_lines(lines), 1):
        try:
            if isinstance(raw, ValueError):
                raise raw
            # A BOM (a file saved by a Windows editor) opens the first line; CRLF ends are JSON whitespace.
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            if not line.strip():
                continue
            value = json.loads(line)
        except ValueError as err:  # UnicodeDecodeError or json.JSONDecodeError
            if not yield_broken:
                raise JsonlError(path, number, err) from err
            value = JsonlError(path, number, err)
        yield number, value


def read_log(path: str | Path, data: bytes | None = None) -> list[Any]:
    """The values of an append-only JSON-lines log (a run's metrics, its traces), in order. A last line a killed
    writer cut short (not JSON, no closing newline) is left out with a warning naming it; any other line that is
    not JSON raises ``JsonlError``. ``data``: the file's bytes, when the caller has read them (it acts on them).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "metrics.jsonl"
    >>> _ = path.write_text('{"step": 1}\\n{"step": 2, "rew')
    >>> read_log(path)
    [{'step': 1}]
    """
    path = Path(path)
    # One read: in two (the lines, then the last byte), a line the writer finishes between them reads as cut
    # short in the first and as whole in the second, and is refused as a broken line.
    data = path.read_bytes() if data is None else data
    values = [value for _, value in _parse_lines(path, io.BytesIO(data), yield_broken=True)]
    if values and isinstance(values[-1], JsonlError) and not data.endswith(b"\n"):
        logger.warning("left out %s: the last line, which a killed run cut short", values.pop())
    broken = next((value for value in values if isinstance(value, JsonlError)), None)
    if broken is not None:
        raise broken
    return values


@overload
def atomic_write(path: str | Path, content: bytes | str, *, durable: bool = False) -> None: ...


@overload
def atomic_write(path: str | Path, content: Callable[[Path], T], *, durable: bool = False) -> T: ...


def atomic_write(
    path: str | Path, content: bytes | str | Callable[[Path], T], *, durable: bool = False
) -> T | None:
    """Write ``path`` whole or not at all: into a temporary sibling, then renamed over ``path`` in one step.

    ``content`` is bytes or text (UTF-8) to write, or a function that writes the temporary path it is given (a
    file, or a directory it creates) and whose result is returned. ``durable`` flushes the file to disk before
    the rename, so the write also survives a machine that goes down, not only a killed process. A write that
    raises removes the temporary and leaves ``path`` as it was. A directory cannot be renamed over an existing
    one: when another writer published the same directory first, its copy is kept and this one removed
    (concurrent builders of one directory build the same content).
    """
    path = Path(path)
    # pid and a random token: concurrent processes and threads never share a temporary.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        if isinstance(content, bytes | str):
            data = content.encode("utf-8") if isinstance(content, str) else content
            tmp.write_bytes(data)
            result = None
        else:
            result = content(tmp)
        if durable and tmp.is_file():
            with tmp.open("rb") as written:
                os.fsync(written.fileno())
        try:
            os.replace(tmp, path)
        except OSError:
            if not (tmp.is_dir() and path.is_dir()):
                raise
            shutil.rmtree(tmp)  # another writer published the same directory first
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
    return result
