"""DocMemo's page search behind the shared ``Retriever`` interface: one document store's pages scored by a page
encoder (``ragym.envs.retrieval.page_encoders``) against its recorded embeddings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragym.envs.docmemo.store import DocStore
from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.page_encoders import PageEncoder


class PageRetriever:
    """``Retriever`` over one document's pages: docid is the 1-based page number as a string."""

    def __init__(self, store: DocStore, encoder: PageEncoder) -> None:
        """The store's embeddings must come from ``encoder`` (else similarities are meaningless)."""
        if store.encoder != encoder.name:
            raise ValueError(
                f"document {store.doc_id!r} was embedded with {store.encoder!r}, not with {encoder.name!r}"
            )
        self.store, self.encoder = store, encoder

    def similarities(self, queries: Sequence[str]) -> np.ndarray:
        """(num_queries, num_pages) cosine similarity of every page to every query."""
        return self.encoder.encode_queries(queries) @ self.store.embeddings.T

    def batch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        """Top-k pages for each query, best first (ties broken by page order)."""
        sims = self.similarities([str(q) for q in queries])
        k = min(k, self.store.num_pages)
        result = []
        for row in sims:
            order = np.argsort(-row, kind="stable")[:k]
            result.append([self._hit(int(i), float(row[i])) for i in order])
        return result

    def search(self, query: Any, k: int) -> list[Hit]:
        """Top-k pages for one query."""
        return self.batch_search([query], k)[0]

    def _hit(self, index: int, score: float) -> Hit:
        payload = {
            "page": index + 1,
            "type": self.store.page_types[index],
            "summary": self.store.summaries[index],
        }
        return Hit(docid=str(index + 1), score=score, payload=payload)


def similarity_vector(hits: list[Hit], num_pages: int) -> np.ndarray:
    """Dense (num_pages,) similarity from hits; pages the retriever did not return get the lowest score. A hit
    that is no page of the document (a search over another version of it) is an error."""
    sims = np.full(num_pages, np.nan)
    for hit in hits:
        page = int(hit.docid) if hit.docid.isdecimal() else 0
        if not 1 <= page <= num_pages:
            raise ValueError(f"page search returned page {hit.docid!r}, not one of 1..{num_pages}")
        sims[page - 1] = hit.score
    floor = np.nanmin(sims) if hits else 0.0
    return np.where(np.isnan(sims), floor, sims)
