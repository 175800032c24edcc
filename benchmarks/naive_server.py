"""The naive per-request HTTP retrieval server (the paper's FastAPI text retriever) and its client.

Kept as the baseline of ``benchmarks/retrieval_service.py``: one faiss/BM25 call per request, no batching,
no cache, no auth. Training uses the retrieval service instead (``ragym.envs.retrieval.service``, ``ragym serve``).

Server: ``python -m benchmarks.naive_server --kb-dir DIR [--port 8765]`` serves the KB's retrievers
(``bm25``, ``dense`` when the KB has passage vectors, ``image`` for query vectors) on 127.0.0.1 only.
Client: ``HTTPRetriever(url, name)`` implements ``search`` / ``batch_search`` and returns ``Hit`` lists.
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from typing import Any

import numpy as np
from pydantic import BaseModel

from ragym.envs.retrieval.hits import Hit

HOST = "127.0.0.1"  # never exposed beyond the machine


class SearchRequest(BaseModel):
    """Body of ``POST /search``: which retriever, the queries (strings, or vectors as lists), and k."""

    retriever: str
    queries: list[Any]
    k: int


def make_app(retrievers: dict[str, Any]):
    """A FastAPI app with ``POST /search`` over the named retrievers and ``GET /health``."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="ragym retrieval")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"retrievers": sorted(retrievers)}

    @app.post("/search")
    def search(request: SearchRequest) -> list[list[dict[str, Any]]]:
        if request.retriever not in retrievers:
            raise HTTPException(404, f"unknown retriever {request.retriever!r}; serving {sorted(retrievers)}")
        if request.k < 1:
            raise HTTPException(422, "k must be at least 1")
        queries = request.queries
        if request.retriever == "image":  # vectors travel as JSON lists
            queries = [np.asarray(q, dtype=np.float32) for q in queries]
        results = retrievers[request.retriever].batch_search(queries, request.k)
        return [
            [{"docid": h.docid, "score": h.score, "payload": h.payload} for h in hits] for hits in results
        ]

    return app


class HTTPRetriever:
    """Client of ``make_app``'s service; the ``Retriever`` interface over HTTP."""

    def __init__(self, url: str, name: str, timeout_s: float = 30.0):
        self.url = url.rstrip("/")
        self.name = name
        self.timeout_s = timeout_s

    def search(self, query: Any, k: int) -> list[Hit]:
        """Top-k hits for one query (a string, or a vector for the image retriever)."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: list[Any], k: int) -> list[list[Hit]]:
        """Top-k hits per query in one request."""
        plain = [q.tolist() if isinstance(q, np.ndarray) else q for q in queries]
        body = json.dumps({"retriever": self.name, "queries": plain, "k": k}).encode()
        request = urllib.request.Request(
            f"{self.url}/search", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            results = json.loads(response.read())
        return [[Hit(h["docid"], h["score"], h["payload"]) for h in hits] for hits in results]


def kb_retrievers(kb_dir: str) -> dict[str, Any]:
    """The retrievers a KB folder can serve."""
    from ragym.envs.kbvqa.kb import load_kb

    kb = load_kb(kb_dir)
    served = {"image": kb.image_retriever()}
    served.update({kind: kb.text_retriever(kind) for kind in kb.text_retrievers()})
    return served


def main(argv: list[str] | None = None) -> int:
    """Serve a KB's retrievers on 127.0.0.1."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb-dir", required=True)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    uvicorn.run(make_app(kb_retrievers(args.kb_dir)), host=HOST, port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
