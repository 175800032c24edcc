"""MEMORA-v0's document collections and in-process first-stage retrievers, loaded once per process.

The verl agent loop builds a fresh env for every episode, so corpora and BM25 indexes are cached here by
path: one load per process, shared by every env instance.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ragym.envs.files import read_jsonl
from ragym.envs.memora.synthetic import SyntheticConfig, SyntheticDomain, synthetic_domain
from ragym.envs.retrieval.hits import Retriever
from ragym.envs.retrieval.retrievers import BM25Retriever


@dataclass(frozen=True)
class Collection:
    """Document texts by id and the first-stage retriever over them."""

    texts: dict[str, str]
    retriever: Retriever


def read_corpus(path: Path) -> dict[str, str]:
    """A ``documents.jsonl`` written by ``ragym prep``: one ``{"id", "content"}`` object per line."""
    texts: dict[str, str] = {}
    for number, row in read_jsonl(path):
        try:
            docid, content = str(row["id"]), row["content"]
        except (KeyError, TypeError) as err:
            raise ValueError(
                f"{path}:{number}: expected a JSON object with 'id' and 'content': {err}"
            ) from err
        if not isinstance(content, str):
            raise ValueError(f"{path}:{number}: 'content' must be a string")
        if docid in texts:
            raise ValueError(f"{path}:{number}: duplicate document id {docid!r}")
        texts[docid] = content
    if not texts:
        raise ValueError(f"{path}: no documents")
    return texts


def bm25_collection(texts: dict[str, str]) -> Collection:
    """BM25 over ``texts`` (hits carry no payload: the env looks texts up by id)."""
    docids = list(texts)
    return Collection(texts, BM25Retriever.build([texts[d] for d in docids], docids))


@functools.lru_cache(maxsize=8)
def corpus_texts(path: str) -> dict[str, str]:
    """The documents of a corpus file, read once per process."""
    return read_corpus(Path(path))


@functools.lru_cache(maxsize=8)
def corpus_collection(path: str) -> Collection:
    """The BM25 collection of a corpus file, built once per process."""
    return bm25_collection(corpus_texts(path))


@functools.lru_cache(maxsize=4)
def synthetic_collection(seed: int = 0) -> tuple[SyntheticDomain, Collection]:
    """The built-in synthetic domain and its BM25 collection."""
    domain = synthetic_domain(SyntheticConfig(seed=seed))
    return domain, bm25_collection(domain.corpus)
