"""The one retrieval interface every retriever implements, and the hit it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Hit:
    """One retrieval result: a document/entity id, its score, and whatever the caller needs to show it."""

    docid: str
    """Identifier of the retrieved item (entity id, chunk id, page id)."""
    score: float
    """Similarity score; higher is better."""
    payload: dict[str, Any] = field(default_factory=dict)
    """Item data (entity name, image path, passage text...), never gold labels."""


@runtime_checkable
class Retriever(Protocol):
    """The one retrieval interface: faiss in process, the HTTP retrieval server, BM25, and test fakes."""

    def search(self, query: Any, k: int) -> list[Hit]:
        """Top-k hits for one query, best first."""
        ...

    def batch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        """Top-k hits for each query, best first."""
        ...
