"""Swapping a served retriever's version under load: no request fails, none mixes versions (a version's query map
and its document rows are served together)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ragym.envs.retrieval.retrievers import FaissRetriever, IndexSpec
from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.client import ClientConfig, RetrievalRequestError, ServiceRetriever
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.versions import (
    VERSION_KEY,
    DocumentRows,
    EncoderSlot,
    QueryEncoder,
    VersionedRetriever,
    save_query_encoder,
)
from tests.envs.retrieval.service.helpers import running

DIM, NUM_DOCS, NUM_CLIENTS, REQUESTS_PER_CLIENT, QUERIES_PER_REQUEST, NUM_SWAPS = 16, 200, 4, 60, 4, 6


def _versions(root: Path) -> dict[str, QueryEncoder]:
    """Versions v1..v6 written under ``root``, each with a map and new rows for d0..d(29 + 10 i) (a document side)."""
    rng = np.random.default_rng(0)
    versions = {}
    for i in range(NUM_SWAPS):
        matrix = np.eye(DIM, dtype=np.float32) + 0.3 * rng.standard_normal((DIM, DIM)).astype(np.float32)
        rows = rng.standard_normal((30 + 10 * i, DIM)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        documents = DocumentRows(tuple(f"d{r}" for r in range(len(rows))), rows)
        version = QueryEncoder(f"v{i + 1}", matrix, {}, documents)
        save_query_encoder(version, root / version.version)
        versions[version.version] = version
    return versions


def _score(version: QueryEncoder | None, original: np.ndarray, query: np.ndarray, docid: str) -> float:
    """What ``version`` scores ``docid`` for ``query``, by hand: its map, its row or else the index's own."""
    if version is None:
        return float(query @ original[int(docid[1:])])
    assert version.documents is not None
    rows = dict(zip(version.documents.ids, version.documents.vectors, strict=True))
    return float(version.encode(query[None])[0] @ rows.get(docid, original[int(docid[1:])]))


def test_a_swap_under_load_fails_no_request_and_mixes_no_versions(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    docs = rng.standard_normal((NUM_DOCS, DIM)).astype(np.float32)
    versioned = VersionedRetriever(
        FaissRetriever.from_vectors(docs, [f"d{i}" for i in range(NUM_DOCS)]), EncoderSlot()
    )
    # Batches of 2 with a wait: a request's 4 queries go to two batches, which a swap between them would split.
    config = ServiceConfig(max_batch_size=2, max_wait_ms=5.0, cache_size=0, gc_freeze=False)
    app = RetrievalApp({"image": Served(versioned, "vector", DIM)}, config)
    versions = _versions(tmp_path)
    original = versioned.base.index.reconstruct_n(0, NUM_DOCS)
    errors, mixed, misscored, seen, done = [], [], [], set(), threading.Event()
    with running(app) as url:
        client_config = ClientConfig(timeout_s=30.0, max_retries=0)

        def load(seed: int) -> None:
            client, local = ServiceRetriever(url, "image", client_config), np.random.default_rng(seed)
            for _ in range(REQUESTS_PER_CLIENT):  # bounded: the loop stops by itself
                queries = list(local.standard_normal((QUERIES_PER_REQUEST, DIM)).astype(np.float32))
                try:
                    results = client.batch_search(queries, 3)
                except Exception as error:  # noqa: BLE001 - every failure is counted, none may happen
                    errors.append(repr(error))
                    continue
                named = {hit.payload.get(VERSION_KEY) for hits in results for hit in hits}
                seen.update(named)
                if len(named) != 1:
                    mixed.append(named)
                for query, hits in zip(queries, results, strict=True):  # the named version's map and rows
                    for hit in hits:
                        expected = _score(
                            versions.get(hit.payload.get(VERSION_KEY, "")), original, query, hit.docid
                        )
                        if abs(hit.score - expected) > 1e-4:
                            misscored.append((hit, expected))

        threads = [threading.Thread(target=load, args=(i,)) for i in range(NUM_CLIENTS)]
        for thread in threads:
            thread.start()
        admin = ServiceRetriever(url, "image", client_config)
        swapped = []
        for name in versions:
            time.sleep(0.05)
            swapped.append(admin.swap_encoder(str(tmp_path / name))["version"])
        for thread in threads:
            thread.join(timeout=120)
        done.set()
    assert errors == [] and mixed == [] and misscored == []
    assert swapped == [f"v{i + 1}" for i in range(NUM_SWAPS)] and versioned.version == swapped[-1]
    assert len(seen - {None}) >= 2, f"the swaps did not happen under load: versions seen {seen}"


def test_a_service_whose_index_cannot_replace_rows_refuses_a_version_with_rows_and_says_so_when_ready(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(1)
    docs = rng.standard_normal((NUM_DOCS, DIM)).astype(np.float32)
    hnsw = FaissRetriever.from_vectors(docs, [f"d{i}" for i in range(NUM_DOCS)], spec=IndexSpec(kind="hnsw"))
    versioned = VersionedRetriever(hnsw, EncoderSlot())
    app = RetrievalApp({"image": Served(versioned, "vector", DIM)}, ServiceConfig(gc_freeze=False))
    _versions(tmp_path)
    with running(app) as url:
        client = ServiceRetriever(url, "image", ClientConfig(max_retries=0))
        status = client.call("GET", "/ready", None)["retrievers"]["image"]
        assert "IndexHNSWFlat cannot replace rows" in status["document_rows_refused"]
        with pytest.raises(RetrievalRequestError, match="IndexHNSWFlat cannot replace rows in place"):
            client.swap_encoder(str(tmp_path / "v1"))
        assert versioned.version is None and client.search(docs[0], 1)[0].docid == "d0"
