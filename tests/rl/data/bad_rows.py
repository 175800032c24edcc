"""Test data with one bad row of each kind: missing extra_info, invalid env_options JSON, a missing image.

The bad rows are copies of the source file's last rows; the missing image is that row's query image, deleted
from the KB (no other row uses it), so the row is valid in every way except that its image is gone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

BAD_KINDS = ("missing_extra_info", "invalid_env_options", "missing_image")
"""The row faults ``with_bad_rows`` plants, in the order they follow the good rows."""


def with_bad_rows(source: Path, out: Path, num_good: int) -> dict[str, int]:
    """Write the first ``num_good`` rows of ``source`` plus one bad row of each kind to ``out``.

    Returns kind -> 0-based position in ``out``. The bad rows are copies of good ones with new
    ``extra_info.index`` values (1000 + k), so messages can be checked for both numbers.
    """
    table = pq.read_table(source)
    good = table.slice(0, num_good).to_pylist()
    bad = table.slice(table.num_rows - len(BAD_KINDS)).to_pylist()
    positions = {}
    for k, (kind, row) in enumerate(zip(BAD_KINDS, bad, strict=True)):
        row["extra_info"] = dict(row["extra_info"], index=1000 + k)
        if kind == "missing_extra_info":
            row["extra_info"] = None
        elif kind == "invalid_env_options":
            row["extra_info"]["env_options"] = row["extra_info"]["env_options"][:-3]
        else:
            kb_dir = Path(json.loads(row["extra_info"]["env_kwargs"])["kb_dir"])
            for image in json.loads(row["extra_info"]["env_options"])["query_images"]:
                (kb_dir / image).unlink(missing_ok=True)
        positions[kind] = num_good + k
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(good + bad, schema=table.schema), out)
    return positions


def truncated_copy(source: Path, out: Path) -> Path:
    """``source`` cut to half its bytes: a parquet file whose footer is gone."""
    data = source.read_bytes()
    out.write_bytes(data[: len(data) // 2])
    return out


def zeroed_pages(path: Path) -> Path:
    """``path`` rewritten in place with its pages zeroed and its footer kept: a parquet file whose metadata reads and
    whose rows do not."""
    data = bytearray(path.read_bytes())
    footer = 8 + int.from_bytes(data[-8:-4], "little")  # the metadata, its length and the magic bytes
    start, end = 4, len(data) - footer
    data[start:end] = bytes(end - start)
    path.write_bytes(bytes(data))
    return path
