"""The shared file helpers: an atomic write never leaves a partial file, a broken JSON line is named."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from ragym.envs.files import JsonlError, atomic_write, read_jsonl, read_log


def test_atomic_write_writes_bytes_text_and_through_a_writer(tmp_path: Path) -> None:
    atomic_write(tmp_path / "a.bin", b"\x00\x01")
    atomic_write(tmp_path / "b.txt", "héllo")
    result = atomic_write(tmp_path / "c.txt", lambda tmp: tmp.write_text("via writer"))
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "héllo"
    assert (tmp_path / "c.txt").read_text() == "via writer" and result == len("via writer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt", "c.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "rows.jsonl"
    target.write_text("old\n")

    def half_then_crash(tmp: Path) -> None:
        tmp.write_text("half a ro")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_crash, durable=True)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_a_failed_first_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        atomic_write(tmp_path / "new", lambda tmp: (tmp.mkdir(), (tmp / "x").write_text("1"), 1 / 0))
    assert list(tmp_path.iterdir()) == []


def test_a_directory_published_first_by_another_writer_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "kb"

    def build(text: str):
        def write(tmp: Path) -> None:
            tmp.mkdir()
            (tmp / "kb.json").write_text(text)

        return write

    atomic_write(target, build("first"))
    atomic_write(target, build("second"))  # a racing builder finishing later
    assert (target / "kb.json").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["kb"]


def test_read_jsonl_numbers_lines_and_skips_blank_ones(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n  \n[1, 2]\n"text"\n')
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (4, [1, 2]), (5, "text")]


def test_read_jsonl_reads_gzip(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write('{"a": 1}\n{"a": 2}\n')
    assert [row["a"] for _, row in read_jsonl(path)] == [1, 2]


def test_a_broken_line_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n{"a": 2\n{"a": 3}\n')
    rows = read_jsonl(path)
    assert next(rows) == (1, {"a": 1})
    with pytest.raises(JsonlError, match=r"rows\.jsonl:2: not JSON") as err:
        next(rows)
    assert (err.value.path, err.value.line_number) == (path, 2)


def test_yield_broken_hands_the_error_over_and_reads_on(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 3}\n')
    rows = list(read_jsonl(path, yield_broken=True))
    assert [n for n, _ in rows] == [1, 2, 3]
    assert isinstance(rows[1][1], JsonlError) and rows[1][1].line_number == 2
    assert rows[2][1] == {"a": 3}


def test_a_line_that_is_not_utf8_is_one_broken_line(tmp_path: Path) -> None:
    """A stray byte breaks its own line only: with ``yield_broken`` reading goes on past it."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes('{"a": "café"}\n'.encode() + b'{"a": "\xff"}\n' + b'{"a": 3}\n')
    rows = list(read_jsonl(path, yield_broken=True))
    assert [n for n, _ in rows] == [1, 2, 3]
    assert rows[0][1] == {"a": "café"} and rows[2][1] == {"a": 3}
    assert isinstance(rows[1][1], JsonlError) and rows[1][1].line_number == 2
    with pytest.raises(JsonlError, match=r"rows\.jsonl:2: "):
        list(read_jsonl(path))


def test_a_byte_order_mark_and_crlf_line_ends_are_read_as_the_rows_they_frame(tmp_path: Path) -> None:
    """A file saved with a UTF-8 BOM and Windows line ends: its first row is a row, not a broken line."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n{"a": 2}\r\n')
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (2, {"a": 2})]


def test_a_gzip_file_cut_short_is_one_broken_line_not_a_crash(tmp_path: Path) -> None:
    """A download cut short: the rows before the cut are read, the cut is one broken line naming the file."""
    path = tmp_path / "rows.jsonl.gz"
    data = gzip.compress("".join(f'{{"a": {i}, "pad": "{"x" * 50}"}}\n' for i in range(400)).encode())
    path.write_bytes(data[: len(data) // 2])
    rows = list(read_jsonl(path, yield_broken=True))
    assert len(rows) > 1 and all(row["a"] == i for i, (_, row) in enumerate(rows[:-1]))
    assert isinstance(rows[-1][1], JsonlError) and "cut short" in str(rows[-1][1])
    with pytest.raises(JsonlError, match=r"rows\.jsonl\.gz:\d+: .*cut short"):
        list(read_jsonl(path))


def test_read_log_leaves_out_a_last_line_a_kill_cut_short(tmp_path: Path, caplog) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "rew')
    assert read_log(path) == [{"step": 1}]
    assert "metrics.jsonl:2: not JSON" in caplog.text and "killed run" in caplog.text
    path.write_bytes(
        b'{"step": 1}\n{"step": 2, "x": "\xff"}\n{"step": 3}\n'
    )  # a damaged line is not the kill's
    with pytest.raises(JsonlError, match=r"metrics\.jsonl:2: not JSON"):
        read_log(path)
    path.write_text('{"step": 1}\nnot json\n')  # whole lines: the writer finished it
    with pytest.raises(JsonlError, match=r"metrics\.jsonl:2: not JSON"):
        read_log(path)
