"""Exact inner-product search with torch: how a flat index searches on a GPU when faiss is faiss-cpu.

The GPU install holds one CUDA major, torch's 13; PyPI's faiss GPU wheels are CUDA 12 builds (or want a newer
CUDA 13 runtime than torch pins), so it installs faiss-cpu, and a flat index (``IndexFlatIP``) moves to a GPU as
its vectors in a torch tensor, searched by a matrix product and ``topk``. The ranking is faiss's: best score
first, equal scores by lower row, whatever ``k`` is asked, so a page of a ranking is the slice of a longer one
(``ragym.envs.retrieval.retrievers.page``). Searches like a faiss index: ``search(queries, k) -> (scores, rows)``,
rows -1 past the end.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

SCORE_BYTES = 1 << 30
"""Bytes of the (queries x rows) score block one search step holds with its masks; queries go in chunks under it."""


def is_flat_ip(index: Any) -> bool:
    """Whether ``index`` is a faiss flat index with the inner-product metric (exact search)."""
    if not isinstance(index, faiss.Index):
        return False
    index = faiss.downcast_index(index)
    return isinstance(index, faiss.IndexFlat) and index.metric_type == faiss.METRIC_INNER_PRODUCT


class TorchFlatIndex:
    """A flat inner-product index held as one float32 tensor on ``device``, searched exactly."""

    def __init__(self, vectors: np.ndarray, device: str):
        import torch

        if vectors.ndim != 2:
            raise ValueError(f"a flat index holds a 2-D array of vectors, got shape {vectors.shape}")
        self.torch = torch
        self.device = torch.device(device)
        self.vectors = torch.as_tensor(
            np.ascontiguousarray(vectors, dtype=np.float32), device=self.device
        )  # (n, d)

    @classmethod
    def from_faiss(cls, index: faiss.Index, device: str) -> TorchFlatIndex:
        """The vectors of a faiss flat inner-product index, moved to ``device``."""
        if not is_flat_ip(index):
            raise ValueError(f"{type(index).__name__} is not a flat inner-product index")
        return cls(index.reconstruct_n(0, index.ntotal), device)

    @property
    def ntotal(self) -> int:
        """Rows in the index."""
        return int(self.vectors.shape[0])

    @property
    def d(self) -> int:
        """Vector length."""
        return int(self.vectors.shape[1])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each (num_queries, k), best first; ties by lower row; rows -1 past the end."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        scores = np.full((len(queries), k), -np.finfo(np.float32).max, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        found = min(k, self.ntotal)
        if found <= 0 or not len(queries):
            return scores, rows
        # float32 scores, two bool masks and an int32 running count per (query, row)
        chunk = max(1, SCORE_BYTES // (10 * self.ntotal))
        with self.torch.no_grad():
            for start in range(0, len(queries), chunk):
                got_scores, got_rows = self._top(queries[start : start + chunk], found)
                scores[start : start + chunk, :found] = got_scores
                rows[start : start + chunk, :found] = got_rows
        return scores, rows

    def _top(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows of each query, ties at the k-th score broken by lower row, best first."""
        torch = self.torch
        block = torch.as_tensor(queries, device=self.device) @ self.vectors.T  # (q, n)
        kth = block.topk(k, dim=1).values[:, -1:]  # (q, 1): the k-th best score
        above = block > kth
        # of the rows tied at the k-th score, the lowest-numbered fill the places left after those above it
        tied = block == kth
        places = k - above.sum(dim=1, keepdim=True)  # (q, 1)
        keep = above | (tied & (tied.cumsum(dim=1, dtype=torch.int32) <= places))  # exactly k per query
        picked = keep.nonzero()[:, 1].view(len(queries), k)  # (q, k): kept rows in row order
        picked_scores = block.gather(1, picked)
        order = picked_scores.argsort(
            dim=1, descending=True, stable=True
        )  # stable: equal scores keep row order
        return (picked_scores.gather(1, order).cpu().numpy(), picked.gather(1, order).cpu().numpy())
