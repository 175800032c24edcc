"""Retrieval service throughput against bare faiss, in one run, on loopback.

Measures, on a flat inner-product index of ``--num-vectors`` x ``--dim`` random unit vectors:
1. the naive per-request server (``envs.retrieval_server``: FastAPI, one faiss call per request);
2. bare faiss, ``index.search`` on batches of ``--clients`` queries (the ceiling), and the ragym service
   (``envs.service``: dynamic batching, replay cache) in alternating windows (``--rounds``), so that both
   see the same load on a shared machine;
each server in its own process, loaded by ``--clients`` concurrent keep-alive connections that each send
one single-query search at a time, every query distinct (no cache hits). Then the replay cache hit rate
of a GRPO-like workload (``--group-size`` episodes per question, sent concurrently group by group).

Usage: ``python benchmarks/retrieval_service.py [--num-vectors 200000] [--dim 768] [--clients 64]
[--seconds 12] [--rounds 4] [--k 10]``. Last line: ``ratio=<service QPS / bare faiss QPS> p99/p50=<x>``
(goals: ratio >= 0.8, p99/p50 <= 2.5).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envs.retrieval import FaissRetriever  # noqa: E402

BLAS_THRESHOLD = 4
"""faiss uses BLAS from this many queries up: the service's batches and the ceiling's both take it."""


def unit_vectors(num: int, dim: int, seed: int) -> np.ndarray:
    """(num, dim) float32 random unit vectors, generated in chunks to bound the temporary memory."""
    rng = np.random.default_rng(seed)
    out = np.empty((num, dim), dtype=np.float32)
    for start in range(0, num, 20_000):
        chunk = rng.standard_normal((min(20_000, num - start), dim), dtype=np.float32)
        out[start : start + len(chunk)] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    return out


def build_retriever(num: int, dim: int, threads: int) -> FaissRetriever:
    """The benchmark index (seed 0), docids ``d<row>``, no payload, searched with ``threads`` OpenMP threads."""
    faiss.omp_set_num_threads(threads)
    index = faiss.IndexFlatIP(dim)
    index.add(unit_vectors(num, dim, seed=0))
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    return FaissRetriever(index, [f"d{i}" for i in range(num)])


def bare_faiss_qps(
    retriever: FaissRetriever, queries: np.ndarray, batch: int, k: int, seconds: float
) -> float:
    """Queries per second of back-to-back ``index.search`` calls on batches of ``batch``."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        start_row = (done // batch) % (len(queries) // batch) * batch
        rows = queries[start_row : start_row + batch]
        retriever.raw_search(rows, k)
        done += len(rows)
    return done / (time.perf_counter() - start)


def serve(kind: str, port: int, args: argparse.Namespace) -> None:
    """Child process: build the index and serve it with uvicorn on 127.0.0.1 until killed."""
    import uvicorn

    dim, max_wait_ms = args.dim, args.max_wait_ms
    retriever = build_retriever(args.num_vectors, dim, args.faiss_threads)
    if kind == "naive":
        from envs.retrieval_server import make_app

        app = make_app({"image": retriever})
    else:
        from envs.service.app import RetrievalApp, Served
        from envs.service.config import ServiceConfig

        app = RetrievalApp({"vec": Served(retriever, "vector", dim)}, ServiceConfig(max_wait_ms=max_wait_ms))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, http="httptools")


def start_server(kind: str, port: int, args: argparse.Namespace) -> subprocess.Popen:
    """Start a server process and wait (bounded) until it answers."""
    command = [sys.executable, __file__, "--serve", kind, "--port", str(port), "--num-vectors",
               str(args.num_vectors), "--dim", str(args.dim), "--max-wait-ms", str(args.max_wait_ms),
               "--faiss-threads", str(args.faiss_threads)]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": str(args.faiss_threads)})
    path = "/ready" if kind == "ragym" else "/health"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} server exited with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return process
        except OSError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"{kind} server did not start in 300 s")


def request_bytes(path: str, body: bytes) -> bytes:
    """One keep-alive HTTP/1.1 POST, encoded once up front so the load generator costs little CPU."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")  # fmt: skip
    return head.encode() + body


async def _client(port: int, requests: list[bytes], deadline: float, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for request in requests:
            if time.perf_counter() > deadline:
                return
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"server answered {head.splitlines()[0]!r}")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
    finally:
        writer.close()


async def load(port: int, requests: list[bytes], clients: int, seconds: float) -> tuple[float, np.ndarray]:
    """QPS and per-request latencies of ``clients`` connections, each sending its share of ``requests``."""
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    shares = [requests[i::clients] for i in range(clients)]
    await asyncio.gather(*(_client(port, share, deadline, latencies) for share in shares))
    return len(latencies) / (time.perf_counter() - start), np.asarray(latencies)


def encoded_requests(kind: str, queries: np.ndarray, k: int) -> list[bytes]:
    """One single-query search request per query, in the server's wire format."""
    if kind == "naive":
        bodies = [json.dumps({"retriever": "image", "queries": [q.tolist()], "k": k}) for q in queries]
    else:
        bodies = [json.dumps({"retriever": "vec", "k": k, "query": {"f32": base64.b64encode(q.tobytes()).decode()}})
                  for q in queries]  # fmt: skip
    return [request_bytes("/search", b.encode()) for b in bodies]


def measure_naive(args: argparse.Namespace, queries: np.ndarray) -> tuple[float, np.ndarray]:
    """The naive server under the same load, one window (it is the floor, not the comparison)."""
    requests = encoded_requests("naive", queries, args.k)
    process = start_server("naive", args.port, args)
    try:
        return asyncio.run(load(args.port, requests, args.clients, args.seconds))
    finally:
        process.kill()
        process.wait()


def measure_service_and_ceiling(
    args: argparse.Namespace, retriever: FaissRetriever, queries: np.ndarray
) -> tuple[list[float], list[float], np.ndarray]:
    """Alternating windows of bare faiss (server idle) and the service (this process only waits on sockets),
    so both see the same machine load; returns per-window QPS of each and the service's latencies."""
    requests = encoded_requests("ragym", queries, args.k)
    process = start_server("ragym", args.port, args)
    window = args.seconds / args.rounds
    bare, served, latencies = [], [], []
    try:
        asyncio.run(load(args.port, requests[-args.clients * 2 :], args.clients, 30))  # warm-up
        share = (len(requests) - args.clients * 2) // args.rounds
        for r in range(args.rounds):
            bare.append(bare_faiss_qps(retriever, queries, args.clients, args.k, window))
            qps, lat = asyncio.run(
                load(args.port, requests[r * share : (r + 1) * share], args.clients, window)
            )
            served.append(qps)
            latencies.append(lat)
        batches = ready_status(args.port)["batches"]["vec"]
        print(
            f"service batches: mean {batches['mean_batch']:.1f} queries, largest {batches['largest_batch']}"
        )
    finally:
        process.kill()
        process.wait()
    return bare, served, np.concatenate(latencies)


def ready_status(port: int) -> dict:
    """The service's /ready body: cache and batch counters."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/ready")
    return json.loads(conn.getresponse().read())


def grpo_hit_rate(port: int, args: argparse.Namespace) -> tuple[dict, float]:
    """Cache counters after a GRPO-like workload, and the share of its searches that repeat an earlier one
    (the best any cache can do). Each question's group of episodes searches concurrently: every episode
    searches its question's image (k=5, shared by the group), half of them reject and page on (k=10, shared
    among them), and each writes one query of its own (distinct); the data is seen ``--epochs`` times (the
    paper trains 2 epochs), with fresh own queries each time."""
    rng = np.random.default_rng(1)
    questions = unit_vectors(args.questions, args.dim, seed=2)
    requests, keys = [], []
    for _ in range(args.epochs):
        for image in questions:
            group = []
            for e in range(args.group_size):
                own = (image + 0.05 * rng.standard_normal(args.dim).astype(np.float32)).astype(np.float32)
                searches = [(image, 5)] + ([(image, 10)] if e % 2 else []) + [(own, 5)]
                keys += [(v.tobytes(), k) for v, k in searches]
                group += [json.dumps({"retriever": "vec", "k": k, "query": {"f32": base64.b64encode(v.tobytes()).decode()}}).encode()
                          for v, k in searches]  # fmt: skip
            requests.append([request_bytes("/search", b) for b in group])
    repeat_share = 1 - len(set(keys)) / len(keys)
    process = start_server("ragym", port, args)
    try:
        for group in requests:  # one group at a time, its episodes' searches concurrently
            asyncio.run(load(port, group, len(group), 60))
        return ready_status(port)["cache"], repeat_share
    finally:
        process.kill()
        process.wait()


def main() -> None:
    """Run every measurement and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-vectors", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=12.0, help="load time of each side, over all rounds")
    parser.add_argument("--rounds", type=int, default=4, help="alternating bare-faiss / service windows")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--questions", type=int, default=32, help="GRPO workload: questions (groups)")
    parser.add_argument("--group-size", type=int, default=8, help="GRPO workload: episodes per question")
    parser.add_argument("--epochs", type=int, default=2, help="GRPO workload: passes over the questions")
    parser.add_argument("--port", type=int, default=18765)
    # On a shared 2-core machine OpenMP's spinning barriers collapse under contention (a batch took 10x
    # longer with 2 threads than with 1 under load); the ceiling and both servers use the same setting.
    parser.add_argument("--faiss-threads", type=int, default=1, help="faiss OpenMP threads, everywhere")
    parser.add_argument("--serve", choices=("naive", "ragym"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args)
        return
    print(f"index: flat IP, {args.num_vectors} x {args.dim}; {args.clients} clients; k={args.k}; "
          f"faiss threads={args.faiss_threads}", flush=True)  # fmt: skip
    queries = unit_vectors(20_000, args.dim, seed=1)
    naive_qps, naive_lat = measure_naive(args, queries)
    print(f"naive server: {naive_qps:.0f} q/s, p50={np.percentile(naive_lat, 50) * 1e3:.1f} ms "
          f"p99={np.percentile(naive_lat, 99) * 1e3:.1f} ms ({len(naive_lat)} requests)", flush=True)  # fmt: skip
    retriever = build_retriever(args.num_vectors, args.dim, args.faiss_threads)
    bare, served, lat = measure_service_and_ceiling(args, retriever, queries)
    del retriever
    ceiling, qps = float(np.mean(bare)), float(np.mean(served))
    p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
    print(
        f"bare faiss batch {args.clients}: {ceiling:.0f} q/s (windows: {', '.join(f'{x:.0f}' for x in bare)})"
    )
    print(f"ragym service: {qps:.0f} q/s (windows: {', '.join(f'{x:.0f}' for x in served)}), "
          f"p50={p50 * 1e3:.1f} ms p99={p99 * 1e3:.1f} ms ({len(lat)} requests)", flush=True)  # fmt: skip
    cache, repeat_share = grpo_hit_rate(args.port, args)
    print(f"replay cache, GRPO-like workload ({args.questions} questions x {args.group_size} episodes x "
          f"{args.epochs} epochs): hit_rate={cache['hit_rate']:.3f} of a possible {repeat_share:.3f} "
          f"(hits={cache['hits']} joined in flight={cache['joined']} misses={cache['misses']})")  # fmt: skip
    print(f"naive/ceiling={naive_qps / ceiling:.3f}")
    print(f"ratio={qps / ceiling:.3f} p99/p50={p99 / p50:.2f}")


if __name__ == "__main__":
    main()
