"""Retrievers: faiss flat/ANN inner product, BM25, precomputed lists, exact paging, one interface."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.envs.retrieval.hits import Retriever
from ragym.envs.retrieval.retrievers import (
    BM25Retriever,
    CandidateListRetriever,
    FaissRetriever,
    IndexSpec,
    normalise,
    page,
    top_k,
)


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(2000, 32)).astype(np.float32)


def brute_force(vectors: np.ndarray, query: np.ndarray, k: int) -> list[str]:
    scores = normalise(vectors) @ (query / np.linalg.norm(query))
    return [f"d{i}" for i in np.argsort(-scores, kind="stable")[:k]]


def test_flat_search_is_exact_cosine_ranking(vectors: np.ndarray) -> None:
    retriever = FaissRetriever.from_vectors(
        vectors, [f"d{i}" for i in range(len(vectors))], lambda r: {"row": r}
    )
    query = np.random.default_rng(1).normal(size=32).astype(np.float32)
    hits = retriever.search(normalise(query[None])[0], 10)
    assert [h.docid for h in hits] == brute_force(vectors, query, 10)
    assert [h.payload["row"] for h in hits] == [int(h.docid[1:]) for h in hits]
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_ann_indexes_recall_most_of_the_exact_top10(vectors: np.ndarray, kind: str) -> None:
    ids = [f"d{i}" for i in range(len(vectors))]
    ann = FaissRetriever.from_vectors(vectors, ids, spec=IndexSpec(kind=kind, ivf_probe=16))
    queries = normalise(vectors[:50] + 0.1)
    overlap = [len({h.docid for h in ann.search(q, 10)} & set(brute_force(vectors, q, 10))) for q in queries]
    assert np.mean(overlap) >= 8.0


def test_unknown_index_kind_is_an_error(vectors: np.ndarray) -> None:
    with pytest.raises(ValueError, match="unknown index kind"):
        FaissRetriever.from_vectors(
            vectors, [str(i) for i in range(len(vectors))], spec=IndexSpec(kind="lsh")
        )


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_a_nan_or_wrong_length_query_is_an_error_not_an_empty_ranking(vectors: np.ndarray, kind: str) -> None:
    retriever = FaissRetriever.from_vectors(
        vectors, [f"d{i}" for i in range(len(vectors))], spec=IndexSpec(kind)
    )
    query = normalise(vectors[:1])[0]
    broken = query.copy()
    broken[3] = np.nan
    with pytest.raises(ValueError, match="1 of 2 query vectors hold NaN or inf"):
        retriever.batch_search([query, broken], 5)
    with pytest.raises(ValueError, match=r"shape \(1, 16\) for an index of 32-d vectors"):
        retriever.search(query[:16], 5)
    assert len(retriever.search(query, 5)) == 5


def test_paging_concatenates_to_the_full_ranking(vectors: np.ndarray) -> None:
    retriever = FaissRetriever.from_vectors(vectors, [f"d{i}" for i in range(len(vectors))])
    query = normalise(vectors[7:8])[0]
    pages = [h.docid for offset in range(0, 20, 5) for h in page(retriever, query, offset, 5)]
    assert pages == [h.docid for h in retriever.search(query, 20)]
    assert len(set(pages)) == 20


def test_bm25_finds_the_document_sharing_rare_terms(tmp_path) -> None:
    texts = [
        "the cobalt spire was built in 1801",
        "the amber spire stands in brenvale",
        "a moth of the fern group",
    ]
    bm25 = BM25Retriever.build(texts, ["a", "b", "c"], lambda r: {"text": texts[r]})
    assert bm25.search("amber spire", 2)[0].docid == "b"
    bm25.save(tmp_path / "bm25")
    loaded = BM25Retriever.load(tmp_path / "bm25", ["a", "b", "c"])
    assert [[h.docid for h in hits] for hits in loaded.batch_search(["moth", "cobalt 1801"], 1)] == [
        ["c"],
        ["a"],
    ]
    assert loaded.search("zebra", 3) == []  # no shared term, no hit


def test_top_k_ranks_ties_the_later_document_first_whatever_the_sort_kernel() -> None:
    # 5,000 scores drawn from 4 values: numpy's argpartition/argsort leave such ties in a kernel-dependent order
    scores = np.random.default_rng(0).integers(0, 4, size=5000).astype(np.float32)
    for k in (1, 7, 300, 1250, 4999, 5000, 6000):
        want = sorted(range(len(scores)), key=lambda i: (-scores[i], -i))[:k]
        assert top_k(scores, k).tolist() == want
    assert top_k(scores, 0).tolist() == []


def test_bm25_ranks_tied_documents_the_same_on_every_machine() -> None:
    # 400 copies of one text tie on every query term; the distinct documents rank by their own scores
    texts = ["granite harbour lantern"] * 400 + ["granite granite harbour", "lantern"]
    bm25 = BM25Retriever.build(texts, [f"d{i}" for i in range(len(texts))])
    hits = bm25.search("granite harbour lantern", 150)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    tied = [h.docid for h in hits if h.score == hits[5].score]
    assert tied == [f"d{i}" for i in range(399, 399 - len(tied), -1)] and len(tied) >= 140
    assert bm25.search("unseen words only", 10) == []


def test_candidate_lists_page_exactly_and_reject_unknown_keys() -> None:
    lists = CandidateListRetriever({"q": [f"e{i}" for i in range(12)]}, lambda d: {"name": d.upper()})
    assert [h.docid for h in page(lists, "q", 10, 5)] == ["e10", "e11"]
    assert lists.search("q", 1)[0].payload == {"name": "E0"}
    with pytest.raises(KeyError, match="no precomputed candidate list"):
        lists.search("other", 5)


@pytest.mark.parametrize(
    "retriever",
    [
        FaissRetriever.from_vectors(np.eye(4, dtype=np.float32), list("abcd")),
        BM25Retriever.build(["alpha beta", "beta gamma"], ["a", "b"]),
        CandidateListRetriever({"q": ["a"]}),
    ],
)
def test_every_backend_implements_the_retriever_protocol(retriever) -> None:
    assert isinstance(retriever, Retriever)
