"""The one retrieval interface every retriever implements, the hit it returns, and where envs get retrievers."""

from __future__ import annotations

from collections.abc import Mapping
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


@runtime_checkable
class RetrieverSource(Protocol):
    """Where an env gets its retrievers, by name: the retrieval service (one client per name), or in process.

    Every env takes one as ``retriever=`` and asks it for the names it searches (KB-VQA: ``candidates`` or
    ``image``, ``bm25`` or ``dense``; DocMemo: ``pages/<doc_key>``; MEMORA: ``first_stage``; R3G: ``image``),
    the same names the service serves them under.
    """

    def retriever(self, name: str) -> Retriever:
        """The retriever called ``name``."""
        ...


class NamedRetrievers:
    """A ``RetrieverSource`` over retrievers already built in process (an index of one's own, a test fake)."""

    def __init__(self, retrievers: Mapping[str, Retriever]):
        self.retrievers = dict(retrievers)

    def retriever(self, name: str) -> Retriever:
        """The retriever called ``name``; a name this source lacks is an error naming those it has."""
        if name not in self.retrievers:
            raise KeyError(f"no retriever {name!r} here; this source has {sorted(self.retrievers)}")
        return self.retrievers[name]
