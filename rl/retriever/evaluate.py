"""nDCG@10 and Recall@k of a dense encoder on a (queries, corpus, qrels) set: held-out pairs or a BRIGHT task.

Queries are embedded raw (no reasoning trace): MEMORA-R sees [r; q] only in training (section 3.2).
Search is exact inner product over normalised embeddings through ``ragym.envs.retrieval.retrievers.FaissRetriever``, the
same code path the environments use, so evaluation and serving rank identically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sentence_transformers import SentenceTransformer

from ragym.data_prep.encoding import EncodeConfig, Item, encode_to_array
from ragym.data_prep.encoding.encoders import SentenceItems
from ragym.envs.retrieval.ranking import ndcg_at_k, recall_at_k
from ragym.envs.retrieval.retrievers import FaissRetriever
from ragym.rl.retriever.data import EvalSet


@dataclass(frozen=True)
class EvalConfig:
    """What to measure and how to encode."""

    ndcg_k: int = 10
    """Cut-off of the headline metric (the paper reports nDCG@10)."""
    recall_ks: tuple[int, ...] = (10, 100)
    """Cut-offs for Recall@k."""
    batch_size: int = 64
    """Encoding batch size."""
    query_prompt: str | None = None
    """Instruction prepended to queries, as in training (None for MiniLM)."""


def encode(
    model: SentenceTransformer, texts: Sequence[str], batch_size: int, prompt: str | None = None
) -> np.ndarray:
    """Unit-norm float32 embeddings, shape (len(texts), dim)."""
    vectors = model.encode(
        list(texts), batch_size=batch_size, prompt=prompt, normalize_embeddings=True, convert_to_numpy=True
    )
    return np.asarray(vectors, dtype=np.float32)


def encode_corpus(model: SentenceTransformer, corpus: dict[str, str], batch_size: int) -> np.ndarray:
    """Unit-norm float32 (len(corpus), dim) document vectors, in corpus order, through the shared encoding step."""
    items = [Item(docid, text) for docid, text in corpus.items()]
    config = EncodeConfig(
        shard_size=64 * batch_size, batch_size=batch_size, progress=len(items) > 64 * batch_size
    )
    return encode_to_array(items, SentenceItems(model, device=str(model.device)), config=config)


def dense_run(
    model: SentenceTransformer,
    queries: dict[str, str],
    corpus: dict[str, str],
    depth: int,
    config: EvalConfig,
    excluded: Mapping[str, frozenset[str]] | None = None,
) -> dict[str, dict[str, float]]:
    """TREC-style run ``{qid: {docid: score}}`` of the top ``depth`` documents per query, its ``excluded``
    documents removed before the cut-off (BRIGHT's run.py: an excluded document takes no place in the top)."""
    excluded = excluded or {}
    docids = list(corpus)
    retriever = FaissRetriever.from_vectors(encode_corpus(model, corpus, config.batch_size), docids)
    qids = list(queries)
    query_vectors = encode(model, [queries[q] for q in qids], config.batch_size, config.query_prompt)
    extra = max(map(len, excluded.values()), default=0)  # deep enough that depth remain after the removal
    hits = retriever.batch_search(list(query_vectors), depth + extra)
    run = {}
    for qid, row in zip(qids, hits, strict=True):
        kept = [hit for hit in row if hit.docid not in excluded.get(qid, ())][:depth]
        run[qid] = {hit.docid: hit.score for hit in kept}
    return run


def score_run(
    run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], config: EvalConfig
) -> dict[str, float]:
    """Mean nDCG@k and Recall@k over every judged query (a query missing from the run scores 0)."""
    judged = [qid for qid, rels in qrels.items() if any(rel > 0 for rel in rels.values())]
    if not judged:
        raise ValueError("qrels hold no query with a relevant document")
    full_run = {qid: run.get(qid, {}) for qid in judged}
    metrics = {f"ndcg@{config.ndcg_k}": ndcg_at_k(full_run, qrels, k=config.ndcg_k)}
    metrics |= {f"recall@{k}": recall_at_k(full_run, qrels, k=k) for k in config.recall_ks}
    return {name: float(np.mean([per_query[q] for q in judged])) for name, per_query in metrics.items()}


def evaluate_encoder(model: SentenceTransformer, eval_set: EvalSet, config: EvalConfig) -> dict[str, float]:
    """Embed, search and score: ``{"ndcg@10": ..., "recall@10": ..., "num_queries": ...}``."""
    queries, corpus, qrels, excluded = eval_set
    depth = max(config.ndcg_k, *config.recall_ks)
    metrics = score_run(dense_run(model, queries, corpus, depth, config, excluded), qrels, config)
    metrics["num_queries"] = float(len(queries))
    return metrics
