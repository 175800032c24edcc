"""Shared types for every ragym environment: retrieval hits, the retriever interface, the image marker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

MAX_TURN_CHARS = 8192
"""Default upper bound on one policy turn's length in every env (``max_turn_chars``); longer text is an
``oversized`` format error."""
IMAGE_PLACEHOLDER = "<image>"
"""Marks, in an observation's text, where the next image of ``obs["images"]`` goes (one per image, in order)."""


def defuse(text: str) -> str:
    """Text from data or from the policy with any literal image marker defused: an observation's markers are the
    env's own, one per image (a literal ``<image>`` in a document, question or echoed query would make the agent
    loop's image count wrong and end the episode in error)."""
    return text.replace(IMAGE_PLACEHOLDER, "(image)")


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
