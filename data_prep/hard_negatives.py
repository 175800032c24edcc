"""BM25 hard negatives for contrastive training: lexically close answers that belong to other threads."""

from __future__ import annotations

from collections.abc import Sequence

from ragym.envs.retrieval.retrievers import BM25Retriever


def mine_bm25_negatives(
    queries: Sequence[str],
    query_threads: Sequence[str],
    doc_ids: Sequence[str],
    doc_texts: Sequence[str],
    doc_threads: Sequence[str],
    num_negatives: int,
    depth: int,
) -> tuple[list[list[str]], int]:
    """For each query, the ids of its ``num_negatives`` best BM25 documents outside its own thread.

    Excluding the whole thread (not only the positive) keeps other answers to the same question, which are
    usually relevant, from being trained as negatives. ``depth`` is how far down the BM25 ranking to look; tied
    scores rank the later document first, the same on every CPU.
    A query whose top ``depth`` holds too few usable documents is topped up with other-thread documents in a
    fixed order (so every row has the same number of columns); the second return value counts those queries.
    """
    if not (len(queries) == len(query_threads)) or not (len(doc_ids) == len(doc_texts) == len(doc_threads)):
        raise ValueError("queries/query_threads and doc_ids/doc_texts/doc_threads must have matching lengths")
    if num_negatives <= 0 or not queries:
        return [[] for _ in queries], 0
    # The env's BM25 (bm25s scores): documents sharing no term dropped, tied scores the later document first on
    # every CPU (bm25s's own top-k ordered ties by the CPU's sort kernel). Hits name corpus rows.
    retriever = BM25Retriever.build(list(doc_texts), [str(row) for row in range(len(doc_ids))])
    rankings = retriever.batch_search(list(queries), depth)
    negatives, num_topped_up = [], 0
    for i, (thread, hits) in enumerate(zip(query_threads, rankings, strict=True)):
        picked = [int(h.docid) for h in hits if doc_threads[int(h.docid)] != thread][:num_negatives]
        if len(picked) < num_negatives:
            num_topped_up += 1
            picked += _top_up(i, thread, picked, doc_threads, num_negatives - len(picked))
        negatives.append([doc_ids[r] for r in picked])
    return negatives, num_topped_up


def _top_up(seed: int, thread: str, taken: list[int], doc_threads: Sequence[str], count: int) -> list[int]:
    """``count`` more other-thread document rows, walking the corpus from a query-dependent start."""
    num_docs = len(doc_threads)
    extra: list[int] = []
    for step in range(num_docs):
        row = (seed * 7919 + step) % num_docs  # a prime stride spreads different queries over the corpus
        if doc_threads[row] != thread and row not in taken and row not in extra:
            extra.append(row)
            if len(extra) == count:
                break
    return extra
