"""The document side of a co-training round (``update_documents``): which entities move, how, and what a version keeps.

A round scores its queries against the entity vectors the serving version serves (the KB's own, with the rows that
version changed). With ``update_documents`` each entity the round's labels touch (a harvested positive or hard
negative, the mined ones included) is its serving vector plus a learned delta, trained by the same loss as the query
map, and written renormalised; every other entity stays fixed. A version's rows are cumulative: the serving
version's rows, updated by the ones this round moved (``ragym.envs.retrieval.versions.DocumentRows``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ragym.envs.kbvqa.kb import KnowledgeBase
from ragym.envs.retrieval.versions import DocumentRows, QueryEncoder
from ragym.rl.cotrain.buffer import HarvestBuffer

Pair = tuple[str, str, str]
"""(query image, positive entity, hard negative entity)."""


def served_entities(kb: KnowledgeBase, version: QueryEncoder) -> np.ndarray:
    """The float32 (num_entities, dim) entity vectors ``version`` serves: the KB's (not copied; read-only), or a copy
    with its document rows replaced."""
    if version.documents is None:
        return np.asarray(kb.entity_embeddings, dtype=np.float32)
    return version.documents.applied_to(kb.entity_embeddings, kb.entity_row)


def touched_entities(
    buffer: HarvestBuffer, until_step: int, harvested: list[Pair], hard: dict[str, list[str]] | None
) -> list[str]:
    """The entities the harvest's labels name, sorted: every positive and harvested hard negative, and the mined
    negatives of the harvested images (``hard``); a random negative drawn for a pair is no label, and stays fixed."""
    found = {p for _, p, _ in harvested}
    for pooled in buffer.pooled(until_step).values():
        found |= pooled.positives | pooled.negatives
    if hard is not None:
        for query in {q for q, _, _ in harvested}:
            found.update(hard[query])
    return sorted(found)


class EntityTable(nn.Module):
    """The entity vectors a round scores against: fixed, bar the ``trainable`` rows, each its served vector plus a
    learned delta (zero at the start, so a round starts exactly at the serving version)."""

    def __init__(self, vectors: np.ndarray, trainable: list[int]) -> None:
        super().__init__()
        self.register_buffer("vectors", torch.tensor(vectors, dtype=torch.float32))  # (num_entities, dim)
        where = torch.full((len(vectors),), -1, dtype=torch.long)
        where[trainable] = torch.arange(len(trainable))
        self.register_buffer("where", where)  # (num_entities,): a row's delta, or -1
        self.delta = nn.Parameter(torch.zeros(len(trainable), vectors.shape[1]))  # (trainable, dim)
        self.trainable = list(trainable)

    def forward(self, rows: list[int]) -> torch.Tensor:
        """(len(rows), dim) vectors (the loss normalises them)."""
        index = torch.tensor(rows, dtype=torch.long)
        fixed = self.get_buffer("vectors")[index]
        if not self.trainable:
            return fixed
        slot = self.get_buffer("where")[index]
        return fixed + torch.where((slot >= 0)[:, None], self.delta[slot.clamp(min=0)], 0.0)

    def moved(self) -> tuple[list[int], np.ndarray]:
        """The rows whose delta left zero, and their new unit-norm float32 (n, dim) vectors."""
        delta = self.delta.detach()
        picked = [n for n in range(len(self.trainable)) if bool(delta[n].any())]
        rows = [self.trainable[n] for n in picked]
        fresh = self.get_buffer("vectors")[rows] + delta[picked]
        return rows, nn.functional.normalize(fresh, dim=-1).numpy().astype(np.float32)


def next_rows(serving: DocumentRows | None, ids: list[str], vectors: np.ndarray) -> DocumentRows | None:
    """The new version's rows: the serving version's, with ``ids`` (moved this round) set to ``vectors``."""
    rows = {} if serving is None else dict(zip(serving.ids, serving.vectors, strict=True))
    rows.update(zip(ids, vectors, strict=True))
    if not rows:
        return None
    return DocumentRows(tuple(rows), np.stack(list(rows.values())).astype(np.float32))
