"""The report every prep writes: rows in = rows out + rows rejected (with a reason each), per split.

A prep counts each input row once, as read, and then either as written or as rejected under a short reason.
A "split" here is a group of input rows counted on its own: a dataset split (``train``, ``val``) or a kind of
input (``kb`` articles, BRIGHT ``documents``). The report is printed with ``format`` and saved beside the rows
as ``OUT/report.json``; both check the invariant first, so a prep whose counts do not add up fails loudly (a
bug in the prep, never bad input). Prep-specific figures (recall, the split's query ids) go under ``details``.

>>> report = PrepReport("toy")
>>> report.read("train", 3)
>>> report.keep("train", 2)
>>> report.reject("train", "missing_image", "row 2: no file")
>>> report.as_dict()["splits"]
{'train': {'num_rows_in': 3, 'num_rows_out': 2, 'num_rows_rejected': 1, 'rejected_by_reason': {'missing_image': 1}}}
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

EXAMPLES_PER_REASON = 5
"""Rejected rows kept as examples per (split, reason): enough to find the cause, bounded on a full dataset."""

_DETAIL_CHARS = 100
"""A printed detail longer than this is cut (the whole value is in report.json)."""


class UnbalancedReport(RuntimeError):
    """Rows in != rows out + rows rejected for some split: a counting bug in the prep, never bad input."""


class UnreadableFile(ValueError):
    """An input file a prep cannot read in its format at all (a ``.parquet`` that is not parquet, a ``.json`` that
    is not JSON, a CSV without the dataset's columns): none of its rows can be counted, so ``ragym prep`` prints
    this, naming the file, as one line (exit status 2), not a traceback."""


def row_limit(text: str) -> int:
    """``--limit N`` of a prep (an argparse type): a whole number >= 1. A negative value sliced rows off the end and 0
    wrote nothing, both silently.

    >>> row_limit("5")
    5
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1 (rows to read), got {text!r}")
    return value


def parquet_num_rows(path: Path) -> int:
    """Rows of the parquet file ``path``, from its footer; ``UnreadableFile`` naming it when it is not parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except pa.ArrowInvalid as err:  # pyarrow's message does not name the file
        raise UnreadableFile(f"{path} is not a parquet file ({err})") from err


def unreadable_shards(shards: list[Path], err: Exception) -> UnreadableFile:
    """The error for parquet ``shards`` that ``datasets`` could not load (its message names no file): the first shard
    pyarrow cannot read either (a page of corrupt data behind a good footer), else all of them, with ``err``'s first
    line."""
    import pyarrow.parquet as pq

    def first_line(error: Exception) -> str:
        return (str(error).strip().splitlines() or [type(error).__name__])[0]

    for shard in shards:
        try:
            pq.read_table(shard)
        except Exception as shard_err:  # noqa: BLE001 - pyarrow raises OSError or ArrowInvalid for a bad page
            return UnreadableFile(f"{shard}: its rows cannot be read ({first_line(shard_err)})")
    return UnreadableFile(f"{', '.join(map(str, shards))}: datasets could not load them ({first_line(err)})")


class PrepReport:
    """Rows read, written and rejected (by reason) per split of one prep, with its prep-specific details."""

    def __init__(self, dataset: str) -> None:
        self.dataset = dataset
        """The prepared dataset's name (the rows' data source where it has one)."""
        self.num_in: Counter[str] = Counter()
        """Input rows read, per split."""
        self.num_out: Counter[str] = Counter()
        """Rows written, per split."""
        self.rejected: dict[str, Counter[str]] = {}
        """Rejected rows per split, counted by reason."""
        self.examples: list[dict[str, str]] = []
        """The first ``EXAMPLES_PER_REASON`` rejected rows of each (split, reason): split, reason, detail."""
        self.details: dict[str, Any] = {}
        """Prep-specific figures (JSON-able), saved and printed after the counts."""

    def read(self, split: str, num: int = 1) -> None:
        """Count ``num`` input rows of ``split``."""
        self.num_in[split] += num

    def keep(self, split: str, num: int = 1) -> None:
        """Count ``num`` rows of ``split`` written out."""
        self.num_out[split] += num

    def reject(self, split: str, reason: str, detail: str) -> None:
        """Count one rejected row of ``split`` under ``reason``; ``detail`` names the row and what is wrong."""
        reasons = self.rejected.setdefault(split, Counter())
        reasons[reason] += 1
        if reasons[reason] <= EXAMPLES_PER_REASON:
            self.examples.append({"split": split, "reason": reason, "detail": str(detail)})

    def splits(self) -> list[str]:
        """Every split counted, in the order first seen."""
        return list(dict.fromkeys([*self.num_in, *self.num_out, *self.rejected]))

    def num_rejected(self, split: str) -> int:
        """Rejected rows of ``split``, all reasons."""
        return sum(self.rejected.get(split, Counter()).values())

    def check(self) -> None:
        """Raise ``UnbalancedReport`` unless rows in = rows out + rows rejected for every split."""
        broken = {
            s: (self.num_in[s], self.num_out[s], self.num_rejected(s))
            for s in self.splits()
            if self.num_in[s] != self.num_out[s] + self.num_rejected(s)
        }
        if broken:
            raise UnbalancedReport(
                f"{self.dataset}: rows in != rows out + rows rejected for (split: in, out, rejected) {broken}"
            )

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (checked first): dataset, splits, rejected_examples, details."""
        self.check()
        splits = {
            s: {
                "num_rows_in": self.num_in[s],
                "num_rows_out": self.num_out[s],
                "num_rows_rejected": self.num_rejected(s),
                "rejected_by_reason": dict(sorted(self.rejected.get(s, Counter()).items())),
            }
            for s in self.splits()
        }
        return {
            "dataset": self.dataset,
            "splits": splits,
            "rejected_examples": self.examples,
            "details": self.details,
        }

    def save(self, out: Path) -> Path:
        """Write ``out/report.json`` (checked first); returns its path."""
        data = self.as_dict()
        path = Path(out) / "report.json"
        path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        return path

    def format(self) -> str:
        """The report for a terminal (checked first): one line per split, then each detail on one line.

        >>> report = PrepReport("toy")
        >>> report.read("train", 3); report.keep("train", 2); report.reject("train", "no_gold", "row 1")
        >>> report.details["num_entities"] = 7
        >>> print(report.format())
        toy: rows in = rows out + rows rejected
          train  3 = 2 + 1  (no_gold 1)
          num_entities: 7
        """
        data = self.as_dict()
        width = max((len(s) for s in data["splits"]), default=0)
        lines = [f"{self.dataset}: rows in = rows out + rows rejected"]
        for split, counts in data["splits"].items():
            reasons = ", ".join(f"{r} {n}" for r, n in counts["rejected_by_reason"].items())
            lines.append(
                f"  {split.ljust(width)}  {counts['num_rows_in']} = {counts['num_rows_out']}"
                f" + {counts['num_rows_rejected']}" + (f"  ({reasons})" if reasons else "")
            )
        for key, value in self.details.items():
            text = json.dumps(value, default=str)
            cut = text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "..."
            lines.append(f"  {key}: {cut}")
        return "\n".join(lines)
