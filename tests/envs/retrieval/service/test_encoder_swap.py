"""Swapping the query encoder of a served retriever under load: no request fails, none mixes versions."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from ragym.envs.retrieval.retrievers import FaissRetriever
from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.client import ClientConfig, ServiceRetriever
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.versions import (
    VERSION_KEY,
    EncoderSlot,
    QueryEncoder,
    VersionedRetriever,
    save_query_encoder,
)
from tests.envs.retrieval.service.helpers import running

DIM, NUM_DOCS, NUM_CLIENTS, REQUESTS_PER_CLIENT, QUERIES_PER_REQUEST, NUM_SWAPS = 16, 200, 4, 60, 4, 6


def _versions(root: Path) -> list[str]:
    rng = np.random.default_rng(0)
    folders = []
    for i in range(NUM_SWAPS):
        matrix = np.eye(DIM, dtype=np.float32) + 0.3 * rng.standard_normal((DIM, DIM)).astype(np.float32)
        folders.append(str(save_query_encoder(QueryEncoder(f"v{i + 1}", matrix), root / f"v{i + 1}")))
    return folders


def test_a_swap_under_load_fails_no_request_and_mixes_no_versions(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    docs = rng.standard_normal((NUM_DOCS, DIM)).astype(np.float32)
    versioned = VersionedRetriever(
        FaissRetriever.from_vectors(docs, [f"d{i}" for i in range(NUM_DOCS)]), EncoderSlot()
    )
    # Batches of 2 with a wait: a request's 4 queries go to two batches, which a swap between them would split.
    config = ServiceConfig(max_batch_size=2, max_wait_ms=5.0, cache_size=0, gc_freeze=False)
    app = RetrievalApp({"image": Served(versioned, "vector", DIM)}, config)
    folders = _versions(tmp_path)
    errors, mixed, seen, done = [], [], set(), threading.Event()
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
                versions = {hit.payload.get(VERSION_KEY) for hits in results for hit in hits}
                seen.update(versions)
                if len(versions) != 1:
                    mixed.append(versions)

        threads = [threading.Thread(target=load, args=(i,)) for i in range(NUM_CLIENTS)]
        for thread in threads:
            thread.start()
        admin = ServiceRetriever(url, "image", client_config)
        swapped = []
        for folder in folders:
            time.sleep(0.05)
            swapped.append(admin.swap_encoder(folder)["version"])
        for thread in threads:
            thread.join(timeout=120)
        done.set()
    assert errors == [] and mixed == []
    assert swapped == [f"v{i + 1}" for i in range(NUM_SWAPS)] and versioned.version == swapped[-1]
    assert len(seen - {None}) >= 2, f"the swaps did not happen under load: versions seen {seen}"
