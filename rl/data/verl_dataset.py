"""verl's dataset with ragym's row check: the rows verl's trainer reads are checked as ``ragym train`` checks
them (``ragym.rl.data.rows``), and bad ones are listed, then skipped or refused.

A recipe selects it through verl's own seam::

    data:
      custom_cls: {path: pkg://ragym.rl.data.verl_dataset, name: RagymDataset}
      bad_rows: skip        # or refuse; ``ragym train --engine verl --bad-rows refuse`` sets it

verl reads the parquet files into one table (and samples ``data.*_max_samples`` rows from it); this class then
checks each of those rows exactly as the agent loop will receive it (verl's columns, ``extra_info``, the env
built and reset with the row's options) before verl's own prompt-length filter. A bad row is named by its file,
its 0-based position there and its ``extra_info.index``; after sampling, by its position in the sample.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.utils.dataset.rl_dataset import RLHFDataset

from ragym.rl.data.rows import BAD_ROW_POLICIES, RowChecker, RowSet, check_rows, report_bad_rows

logger = logging.getLogger(__name__)

BAD_ROWS_KEY = "bad_rows"
"""The ``data.`` key this class reads: one of ``ragym.rl.data.rows.BAD_ROW_POLICIES`` (default ``skip``)."""


class RagymDataset(RLHFDataset):
    """``RLHFDataset`` whose rows passed ragym's row check; bad rows are reported as the local engine does."""

    def maybe_filter_out_long_prompts(self, dataframe: Any = None) -> Any:
        """Drop (or refuse) bad rows, then apply verl's prompt-length filter; verl calls this once it has read
        and sampled the files."""
        policy = self.config.get(BAD_ROWS_KEY, "skip")
        if policy not in BAD_ROW_POLICIES:
            raise ValueError(f"data.{BAD_ROWS_KEY}={policy!r} is not one of {', '.join(BAD_ROW_POLICIES)}")
        locations = self._locations(len(dataframe))
        result, checker = RowSet(), RowChecker(check_reset=True)
        try:
            check_rows(
                ((file, position, dataframe[i]) for i, (file, position) in enumerate(locations)),
                checker,
                result,
            )
        finally:
            checker.close()
        report_bad_rows(result, [str(f) for f in self.data_files], policy)
        if result.bad:
            valid = set(result.positions)
            dataframe = dataframe.select([i for i, location in enumerate(locations) if location in valid])
        return super().maybe_filter_out_long_prompts(dataframe)

    def _locations(self, num_rows: int) -> list[tuple[str, int]]:
        """Each row's (file, position in the file); after verl sampled rows, (the files, position in the sample)."""
        import pyarrow.parquet as pq

        files = [str(f) for f in self.data_files]
        if all(f.endswith(".parquet") for f in files):
            sizes = [pq.ParquetFile(f).metadata.num_rows for f in files]
            if sum(sizes) == num_rows:
                return [(f, p) for f, size in zip(files, sizes, strict=True) for p in range(size)]
        return [(f"sample of {', '.join(files)}", p) for p in range(num_rows)]
