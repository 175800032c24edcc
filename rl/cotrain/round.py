"""One co-training round: fine-tune the query side on the harvest (plus original pairs), measure, write a version.

The query side is the map W of ``ragym.envs.retrieval.versions`` on the KB's query vectors; the documents (entity
vectors) stay fixed, so the index stays valid, unless ``update_documents`` also trains the vectors of the entities
the harvest touched (``ragym.rl.cotrain.documents``), whose rows the version then carries. The loss is the
contrastive trainer's own (``ragym.rl.retriever.train.build_loss``: sentence-transformers'
MultipleNegativesRankingLoss, in-batch negatives plus one hard negative per pair) on the embeddings this map gives;
with ``mined_negatives`` the same in-batch softmax runs over every hard negative of the batch's images (harvested and
mined from the serving version). A round runs in its own process or Ray task (``ragym.rl.cotrain.controller``) and
writes ``version/encoder.{npz,json}`` (and ``documents.npz``) with the held-out recall of the new version and of the
one serving, each searched over the entity vectors it serves, which the controller's forgetting guard compares.
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from ragym.envs.files import read_jsonl
from ragym.envs.kbvqa.kb import KnowledgeBase, load_kb
from ragym.envs.retrieval.retrievers import FaissRetriever
from ragym.envs.retrieval.versions import (
    QueryEncoder,
    identity_encoder,
    load_query_encoder,
    save_query_encoder,
)
from ragym.rl.cotrain.buffer import HarvestBuffer, HeldOut
from ragym.rl.cotrain.config import CotrainConfig
from ragym.rl.cotrain.documents import EntityTable, Pair, next_rows, served_entities, touched_entities
from ragym.rl.retriever.config import LossConfig
from ragym.rl.retriever.train import build_loss

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundSpec:
    """Everything a round process needs (plain data: it crosses a process or Ray boundary)."""

    kb_dir: str
    """The KB whose query side trains."""
    buffer_dir: str
    """The harvest buffer's folder."""
    until_step: int
    """Read the buffer's shards up to this step."""
    serving: str | None
    """The serving version's folder (None: identity)."""
    out: str
    """The new version's folder."""
    version: str
    """The new version's name."""
    guard_pairs: tuple[tuple[str, str], ...]
    """(query image, gold entity) of the held-out retrieval set."""
    recall_ks: tuple[int, ...]
    """Cut-offs measured on it (the guard's among them)."""
    config: dict[str, Any]
    """``CotrainConfig`` fields."""


class QueryTower(nn.Module):
    """W as a torch module: every weight (``full``) or the serving W plus a low-rank delta B A (``lora``)."""

    def __init__(self, start: np.ndarray, mode: str, rank: int, seed: int) -> None:
        super().__init__()
        base = torch.tensor(start, dtype=torch.float32)  # (dim, dim)
        generator = torch.Generator().manual_seed(seed)
        if mode == "full":
            self.weight = nn.Parameter(base.clone())
        else:
            self.register_buffer("base", base)
            dim = base.shape[0]
            # B starts at 0, so a round starts exactly at the serving version (as LoRA does)
            self.lora_a = nn.Parameter(torch.randn(rank, dim, generator=generator) / dim**0.5)
            self.lora_b = nn.Parameter(torch.zeros(dim, rank))
        self.mode = mode

    def matrix(self) -> torch.Tensor:
        """W (dim, dim), the delta merged."""
        if self.mode == "full":
            return self.weight
        base = cast(torch.Tensor, self.base)  # a registered buffer
        return base + self.lora_b @ self.lora_a

    def forward(self, queries: torch.Tensor) -> torch.Tensor:
        """(n, dim) query vectors -> (n, dim) unit-norm embeddings."""
        return nn.functional.normalize(queries @ self.matrix().T, dim=-1)


def training_pairs(
    buffer: HarvestBuffer, until_step: int, entities: list[str], rng: random.Random
) -> list[Pair]:
    """One pair per (query, checked positive); its hard negative drawn from the query's harvested negatives, else
    (no negative harvested for it) a random other entity."""
    pairs = []
    for query, pooled in sorted(buffer.pooled(until_step).items()):
        negatives = sorted(pooled.negatives)
        for positive in sorted(pooled.positives):
            negative = (
                rng.choice(negatives) if negatives else rng.choice([e for e in entities if e != positive])
            )
            pairs.append((query, positive, negative))
    return pairs


def original_pairs(path: str, entities: list[str], rng: random.Random) -> list[Pair]:
    """The encoder's original training pairs (JSONL ``query``, ``positives``, ``negatives``)."""
    pairs = []
    for line, record in read_jsonl(path):
        if not record.get("positives"):
            raise ValueError(f"{path}:{line}: an original pair needs a positive")
        for positive in record["positives"]:
            negatives = record.get("negatives") or [e for e in entities if e != positive]
            pairs.append((record["query"], positive, rng.choice(negatives)))
    return pairs


def hard_negatives(
    buffer: HarvestBuffer,
    until_step: int,
    kb: KnowledgeBase,
    serving: QueryEncoder,
    pairs: list[Pair],
    mined: int,
) -> dict[str, list[str]]:
    """Query image -> its hard negatives: every harvested one (pair's own for original pairs) plus the serving
    version's top ``mined`` entities for it, its positives excluded (the look-alikes ranked around the gold)."""
    pooled = buffer.pooled(until_step)
    queries = sorted({q for q, _, _ in pairs})
    exact = FaissRetriever.from_vectors(served_entities(kb, serving), kb.entities["entity_id"].tolist())
    positives: dict[str, set[str]] = {}
    for query, positive, _ in pairs:
        positives.setdefault(query, set()).add(positive)
    vectors = serving.encode(query_vectors(kb, queries))
    found: dict[str, list[str]] = {}
    depth = mined + max(len(p) for p in positives.values())  # enough to drop an image's own positives
    for query, hits in zip(queries, exact.batch_search(list(vectors), depth), strict=True):
        harvested = sorted(pooled[query].negatives) if query in pooled else []
        own = [n for q, _, n in pairs if q == query and query not in pooled]
        ranked = [h.docid for h in hits if h.docid not in positives[query]][:mined]
        found[query] = [n for n in dict.fromkeys(harvested + own + ranked) if n not in positives[query]]
    return found


def query_vectors(kb: KnowledgeBase, queries: list[str]) -> np.ndarray:
    """The KB's stored (n, dim) vectors of query images (an image without one is an error naming it)."""
    if kb.query_embeddings is None:
        raise ValueError(
            f"{kb.root} stores no query embeddings; co-training needs index/query_embeddings.npy"
        )
    rows = [kb.query_index(q) for q in queries]
    missing = [q for q, r in zip(queries, rows, strict=True) if r is None]
    if missing:
        raise ValueError(f"{kb.root}/queries.parquet has no vector for query images {missing[:3]}")
    return np.asarray(kb.query_embeddings[[int(r) for r in rows if r is not None]], dtype=np.float32)


def recall(
    kb: KnowledgeBase, encoder: QueryEncoder, pairs: tuple[tuple[str, str], ...], ks: tuple[int, ...]
) -> dict[str, float]:
    """R@k of ``encoder`` over the held-out (query image, gold entity) pairs, exact search over the entity vectors
    it serves (its document rows in place of the KB's)."""
    if not pairs:
        return {}
    exact = FaissRetriever.from_vectors(served_entities(kb, encoder), kb.entities["entity_id"].tolist())
    vectors = encoder.encode(query_vectors(kb, [q for q, _ in pairs]))
    hits = exact.batch_search(list(vectors), max(ks))
    ranks = [
        [h.docid for h in row].index(gold) if gold in [h.docid for h in row] else None
        for row, (_, gold) in zip(hits, pairs, strict=True)
    ]
    return {f"recall@{k}": float(np.mean([r is not None and r < k for r in ranks])) for k in ks}


def run_round(spec: RoundSpec) -> dict[str, Any]:
    """Train one version and write it; returns its ``encoder.json`` metadata (the guard reads ``recall_*``)."""
    cfg = CotrainConfig(**spec.config)
    torch.set_num_threads(1)  # off the step path, beside the policy's own threads
    kb = load_kb(spec.kb_dir)
    serving = (
        load_query_encoder(spec.serving) if spec.serving else identity_encoder(kb.entity_embeddings.shape[1])
    )
    rng = random.Random(cfg.seed + spec.until_step)
    entities = kb.entities["entity_id"].tolist()
    harvested = training_pairs(
        HarvestBuffer(Path(spec.buffer_dir), HeldOut()), spec.until_step, entities, rng
    )
    original = original_pairs(cfg.original_data, entities, rng) if cfg.original_data else []
    tower = QueryTower(serving.matrix, cfg.mode, cfg.lora_rank, cfg.seed + spec.until_step)
    negatives = (
        hard_negatives(
            HarvestBuffer(Path(spec.buffer_dir), HeldOut()),
            spec.until_step,
            kb,
            serving,
            harvested + original,
            cfg.mined_negatives,
        )
        if cfg.mined_negatives and harvested
        else None
    )
    touched = (
        touched_entities(
            HarvestBuffer(Path(spec.buffer_dir), HeldOut()), spec.until_step, harvested, negatives
        )
        if cfg.update_documents
        else []
    )
    table = EntityTable(served_entities(kb, serving), [kb.entity_row[e] for e in touched])
    if harvested:
        _fit(tower, table, kb, harvested, original, cfg, rng, negatives)
    matrix = tower.matrix().detach().numpy().astype(np.float32)
    rows, vectors = table.moved()
    documents = next_rows(serving.documents, [entities[r] for r in rows], vectors)
    meta = {
        "step": spec.until_step,
        "num_harvested_pairs": len(harvested),
        "num_original_pairs": len(original),
        "serving": serving.version,
        "mode": cfg.mode,
        "lr": cfg.lr,
        "optimiser": cfg.optimiser,
        "mined_negatives": cfg.mined_negatives,
        "round_steps": cfg.round_steps,
        "update_documents": cfg.update_documents,
        "document_lr": cfg.document_lr,
        "num_documents_moved": len(rows),
    }
    new = QueryEncoder(spec.version, matrix, meta, documents)
    for name, encoder in (("new", new), ("serving", serving)):
        meta.update(
            {f"{name}_{k}": v for k, v in recall(kb, encoder, spec.guard_pairs, spec.recall_ks).items()}
        )
    save_query_encoder(QueryEncoder(spec.version, matrix, meta, documents), Path(spec.out))
    logger.info("co-training round %s: %d harvested pairs, %s", spec.version, len(harvested), meta)
    return meta


def _fit(
    tower: QueryTower,
    table: EntityTable,
    kb: KnowledgeBase,
    harvested: list[Pair],
    original: list[Pair],
    cfg: CotrainConfig,
    rng: random.Random,
    hard: dict[str, list[str]] | None,
) -> None:
    """``cfg.round_steps`` optimiser steps of the contrastive loss on batches mixing harvest and original pairs,
    the query map and ``table``'s trainable entity deltas (at ``document_lr``) together; ``hard``
    (``mined_negatives``): the in-batch softmax over the batch's distinct golds and hard negatives."""
    loss_fn = build_loss(tower, LossConfig(name="mnrl", scale=cfg.scale))  # pyright: ignore[reportArgumentType]
    groups: list[dict[str, Any]] = [
        {"params": [p for p in tower.parameters() if p.requires_grad], "lr": cfg.lr}
    ]
    if table.trainable:
        groups.append({"params": [table.delta], "lr": cfg.document_lr})
    optimiser = (
        torch.optim.SGD(groups, lr=cfg.lr)
        if cfg.optimiser == "sgd"
        else torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=0.0)
    )
    num_original = round(cfg.batch_size * cfg.original_share) if original else 0
    for _ in range(cfg.round_steps):
        batch = _draw(harvested, cfg.batch_size - num_original, rng) + _draw(original, num_original, rng)
        queries = torch.tensor(query_vectors(kb, [q for q, _, _ in batch]))  # (batch, dim)
        if hard is not None:
            loss = _union_loss(tower(queries), batch, hard, table, kb.entity_row, cfg.scale)
        else:
            positives = table([kb.entity_row[p] for _, p, _ in batch])  # (batch, dim)
            negatives = table([kb.entity_row[n] for _, _, n in batch])  # (batch, dim)
            embeddings = [tower(queries), positives, negatives]
            loss = loss_fn.compute_loss_from_embeddings(embeddings, None)  # pyright: ignore[reportCallIssue]
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()


def _union_loss(
    anchors: torch.Tensor,
    batch: list[Pair],
    hard: dict[str, list[str]],
    table: EntityTable,
    entity_row: dict[str, int],
    scale: float,
) -> torch.Tensor:
    """MNRL's cross-entropy over the batch's distinct candidates (every gold and hard negative once), each anchor's
    label its own gold: a look-alike that is one image's gold and another's negative is scored once, never
    against its own image."""
    candidates = list(dict.fromkeys([p for _, p, _ in batch] + [n for q, _, _ in batch for n in hard[q]]))
    vectors = nn.functional.normalize(table([entity_row[c] for c in candidates]), dim=-1)
    labels = torch.tensor([candidates.index(p) for _, p, _ in batch])
    return nn.functional.cross_entropy(scale * anchors @ vectors.T, labels)  # anchors are unit-norm


def _draw(pairs: list[Pair], count: int, rng: random.Random) -> list[Pair]:
    """Up to ``count`` distinct pairs (a repeated pair would be scored as its own copy's negative)."""
    return rng.sample(pairs, min(max(count, 0), len(pairs)))


def spec_dict(spec: RoundSpec) -> dict[str, Any]:
    """The spec as plain data (logged beside the version)."""
    return asdict(spec)
