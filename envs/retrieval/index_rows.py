"""Rows of a built index overwritten in place: how a retriever version's document-side rows reach the index.

A co-training version that updates the document side (``ragym.rl.cotrain``, ``update_documents``) carries the
entity vectors it changed; serving it re-writes only those rows of the index the retriever searches, and a later
version that no longer changes a row writes the KB's own vector back (kept here from before the first write).
Only an exact flat inner-product index can do that (faiss ``IndexFlatIP``, or its GPU form ``TorchFlatIndex``, in
one shard or several): a graph (HNSW), inverted lists (IVF) or compressed codes (RaBitQ, a disk refine step) hold
each vector in a structure built around it, so ``IndexRows`` refuses them when it is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import faiss
import numpy as np

from ragym.envs.retrieval.retrievers import FaissRetriever, SearchIndex
from ragym.envs.retrieval.service.shards import ShardedRetriever
from ragym.envs.retrieval.torch_flat import TorchFlatIndex, is_flat_ip


class RowsNotReplaceable(ValueError):
    """The index searched cannot overwrite a row in place (a document-side update needs a flat index)."""


def refusal(base: FaissRetriever | ShardedRetriever) -> str | None:
    """Why ``base``'s index cannot replace rows in place, or None when it can."""
    for shard in base.shards if isinstance(base, ShardedRetriever) else [base]:
        if not (isinstance(shard.index, TorchFlatIndex) or is_flat_ip(shard.index)):
            index = faiss.downcast_index(shard.index) if isinstance(shard.index, faiss.Index) else shard.index
            return (
                f"{type(index).__name__} cannot replace rows in place: a document-side update "
                "needs an exact flat index (index_kind flat, or a KB whose recorded index is Flat)"
            )
    return None


def _storage(index: SearchIndex) -> np.ndarray | TorchFlatIndex:
    """What holds the index's vectors: a writable (ntotal, d) view of a faiss flat index, or the torch index."""
    if isinstance(index, TorchFlatIndex):
        return index
    # an IndexFlat (``refusal`` lets no other faiss index through), whose storage the stubs do not declare
    flat: Any = faiss.downcast_index(cast(faiss.Index, index))
    return faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d)


class IndexRows:
    """The vectors of a flat retriever (one shard or several) by docid, overwritten in place, originals kept."""

    def __init__(self, base: FaissRetriever | ShardedRetriever) -> None:
        reason = refusal(base)
        if reason is not None:
            raise RowsNotReplaceable(reason)
        shards = base.shards if isinstance(base, ShardedRetriever) else [base]
        self._stores = [_storage(shard.index) for shard in shards]
        self._where = {d: (s, r) for s, shard in enumerate(shards) for r, d in enumerate(shard.docids)}
        self._original: dict[str, np.ndarray] = {}  # the index's own vector of every row ever overwritten

    def unknown(self, ids: Sequence[str]) -> list[str]:
        """The ids no row of the index holds."""
        return [i for i in ids if i not in self._where]

    def write(self, ids: Sequence[str], vectors: np.ndarray | None) -> None:
        """Serve ``vectors`` ((len(ids), d) unit-norm) at ``ids``' rows; None: each row's original vector."""
        missing = self.unknown(ids)
        if missing:
            raise KeyError(f"{len(missing)} document ids are no row of the index: {missing[:3]}")
        for shard, store in enumerate(self._stores):
            picked = [n for n, docid in enumerate(ids) if self._where[docid][0] == shard]
            if not picked:
                continue
            names = [ids[n] for n in picked]
            rows = np.array([self._where[d][1] for d in names], dtype=np.int64)
            fresh = [n for n, d in enumerate(names) if d not in self._original]
            for n, vector in zip(fresh, _read(store, rows[fresh]), strict=True):
                self._original[names[n]] = vector
            values = (
                np.stack([self._original[d] for d in names])
                if vectors is None
                else np.asarray(vectors, dtype=np.float32)[picked]
            )  # (rows, d)
            _write(store, rows, values)


def _read(store: np.ndarray | TorchFlatIndex, rows: np.ndarray) -> np.ndarray:
    """A copy of ``rows`` (float32 (len(rows), d))."""
    if isinstance(store, TorchFlatIndex):
        return store.vectors[store.torch.as_tensor(rows, device=store.device)].cpu().numpy()
    return store[rows]  # fancy indexing copies


def _write(store: np.ndarray | TorchFlatIndex, rows: np.ndarray, values: np.ndarray) -> None:
    if isinstance(store, TorchFlatIndex):
        where = store.torch.as_tensor(rows, device=store.device)
        store.vectors[where] = store.torch.as_tensor(values, device=store.device)
    else:
        store[rows] = values
