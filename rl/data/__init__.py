"""Dataset rows for every entry point (train, eval, rollout): loaded and validated in one place."""

from ragym.rl.data.rows import BadRow, RowSet, load_rows

__all__ = ["BadRow", "RowSet", "load_rows"]
