"""Retrieval service throughput against bare faiss, as users deploy it, idle and beside a busy co-tenant.

The index is a recorded one: ``--kb-dir KB`` (the KB's entity index, retriever ``image``), or by default a
flat index of ``--num-vectors`` x ``--dim`` random unit vectors written once by the encoding step's index code
(``ragym.data_prep.encoding.index``: what a KB records below 200k vectors) and served as a shard manifest
(retriever ``vec``). The service is ``ragym serve`` in its own process with its defaults (plus
``--serve-args`` to measure a tuned setting), in this machine's environment untouched. Bare faiss is the same
index loaded the way ``ragym serve`` loads it, searched here in batches of ``--clients`` queries, with one
OpenMP thread and with one per core (the reference is the better of the two, so the service is compared with
bare faiss at its best). Two settings, each alternating windows of bare faiss and the service (``--rounds``):
``idle`` (nothing else of ours running) and ``co-tenant`` (``--cotenants`` CPU-bound processes, each bounded by
a deadline, as rollout workers keep a training node busy). Load: ``--clients`` concurrent keep-alive
connections on loopback, each sending one single-query search at a time, every query distinct (no cache hits).
Each service window also reports ``index busy``: the share of its wall time the index calls were running (the
service's ``busy_s`` counter in ``/ready``); the rest went to the request path and to batches filling, which with
closed-loop clients cannot overlap the search (every client waits on the batch being searched). Then, unless
``--questions 0``, the replay cache hit rate of a GRPO-like workload. Last, unless ``--no-floor``, the HTTP floor:
the same load on ``ragym serve`` over a flat index of ``--floor-vectors`` vectors of the same dimension (the same
request path with almost no search), in both settings; it is bound by round trips and the batch wait as much as
by CPU, so it is no bound on the ratio.

Usage: ``python benchmarks/retrieval_service.py [--num-vectors 200000] [--dim 768] [--kb-dir KB] [--clients 64]
[--seconds 12] [--rounds 3] [--cotenants 1] [--serve-args "--search-threads 2"]``. Last line:
``ratio=<service QPS / bare faiss QPS> p99/p50=<x> busy=<index busy share>`` in the co-tenant setting (goals:
ratio >= 0.8, p99/p50 <= 2.5).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SERVICE_ENV = dict(os.environ)
"""The service runs in the environment this benchmark was started in, so it chooses as it would for a user."""
# Bare faiss at its best: OpenMP threads that sleep when idle (read once, before faiss loads) for its run with
# one thread per core, so a co-tenant cannot stall them; the service's default policy is the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import faiss  # noqa: E402

from ragym.envs.retrieval.search_settings import available_cores, set_search_threads  # noqa: E402


def unit_vectors(num: int, dim: int, seed: int) -> np.ndarray:
    """(num, dim) float32 random unit vectors, generated in chunks to bound the temporary memory."""
    rng = np.random.default_rng(seed)
    out = np.empty((num, dim), dtype=np.float32)
    for start in range(0, num, 20_000):
        chunk = rng.standard_normal((min(20_000, num - start), dim), dtype=np.float32)
        out[start : start + len(chunk)] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    return out


def recorded_index(num: int, dim: int) -> Path:
    """The benchmark's index folder (``index.json`` + shard), written once by the encoding step's index code."""
    from ragym.data_prep.encoding.index import INDEX_MANIFEST, IndexOptions, VectorBlocks, index_vectors
    from ragym.data_prep.synthetic_kb import cache_root

    out = cache_root() / "bench" / f"service-flat-{num}x{dim}"
    if not (out / INDEX_MANIFEST).is_file():
        print(f"writing a flat index of {num} x {dim} in {out} (once)...", flush=True)
        ids = [f"d{i}" for i in range(num)]
        index_vectors(
            VectorBlocks.from_array(ids, unit_vectors(num, dim, seed=0)),
            out,
            IndexOptions(exact_below=num + 1),
        )
    return out / INDEX_MANIFEST


def target(args: argparse.Namespace) -> tuple[list[str], str, Any]:
    """(``ragym serve`` arguments, retriever name, the index loaded as the service loads it)."""
    if args.kb_dir:
        from ragym.envs.kbvqa.kb import load_kb
        from ragym.envs.retrieval.retrievers import IndexSpec

        return (
            ["--kb-dir", args.kb_dir],
            "image",
            load_kb(args.kb_dir).image_retriever(IndexSpec(kind="auto")),
        )
    from ragym.envs.retrieval.service.shards import ShardedRetriever

    manifest = recorded_index(args.num_vectors, args.dim)
    sharded = ShardedRetriever.from_manifest(manifest)
    return ["--shards", f"vec={manifest}"], "vec", sharded.shards[0] if len(sharded.shards) == 1 else sharded


def bare_faiss_qps(
    retriever: Any, queries: np.ndarray, batch: int, k: int, seconds: float, threads: int
) -> float:
    """Queries per second of back-to-back index searches on batches of ``batch`` with ``threads`` threads."""
    set_search_threads(threads, this_thread=True)
    search = retriever.raw_search if hasattr(retriever, "raw_search") else retriever.batch_search
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        start_row = (done // batch) % (len(queries) // batch) * batch
        rows = queries[start_row : start_row + batch]
        search(rows if hasattr(retriever, "raw_search") else list(rows), k)
        done += len(rows)
    return done / (time.perf_counter() - start)


@contextmanager
def service(serve_args: list[str], port: int, extra: list[str]) -> Any:
    """``ragym serve`` on 127.0.0.1:``port`` in its own process until the block ends; yields its log file."""
    log = Path(tempfile.mkstemp(prefix="ragym-serve-", suffix=".log")[1])
    command = [sys.executable, "-m", "ragym.rl.cli", "serve", *serve_args, "--port", str(port), *extra]
    with log.open("w") as sink:
        process = subprocess.Popen(command, cwd=REPO, env=SERVICE_ENV, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_ready(process, port)
        yield log
    finally:
        process.kill()
        process.wait()
        log.unlink(missing_ok=True)


def wait_ready(process: subprocess.Popen, port: int, timeout_s: float = 600) -> None:
    """Poll ``/ready`` until 200 (bounded); a server that exits is an error."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ragym serve exited with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/ready")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"ragym serve was not ready in {timeout_s:.0f} s")


@contextmanager
def cotenants(count: int, seconds: float) -> Any:
    """``count`` CPU-bound processes, each spinning until the block ends or ``seconds`` pass, whichever first."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    processes = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    try:
        time.sleep(0.3)
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


def request_bytes(path: str, body: bytes) -> bytes:
    """One keep-alive HTTP/1.1 POST, encoded once up front so the load generator costs little CPU."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def encoded_requests(name: str, queries: np.ndarray, k: int) -> list[bytes]:
    """One single-query search request per query, in the service's wire format."""
    bodies = [
        json.dumps({"retriever": name, "k": k, "query": {"f32": base64.b64encode(q.tobytes()).decode()}})
        for q in queries
    ]
    return [request_bytes("/search", b.encode()) for b in bodies]


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


def logged_plan(log: Path) -> str:
    """The threading choice ``ragym serve`` logged at start."""
    lines = [line for line in log.read_text().splitlines() if "faiss search threads:" in line]
    if not lines:
        raise RuntimeError(f"ragym serve logged no threading choice:\n{log.read_text()[-2000:]}")
    return lines[-1].split("faiss search threads:", 1)[1].strip()


def ready_status(port: int) -> dict:
    """The service's /ready body: cache and batch counters, search threads."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/ready")
    return json.loads(conn.getresponse().read())


def busy_seconds(port: int, name: str) -> float:
    """Seconds the service's index calls for retriever ``name`` have run so far (``busy_s`` in ``/ready``)."""
    return ready_status(port)["batches"][name]["busy_s"]


def measure(
    args: argparse.Namespace, index: Any, queries: np.ndarray, requests: list[list[bytes]], name: str
) -> dict:
    """Alternating windows: bare faiss with 1 thread, with one per core, then the service (this process only
    waits on sockets meanwhile); returns per-window QPS of each, the service's latencies and its index busy
    share per window."""
    window, cores = args.seconds / args.rounds, available_cores()
    one, all_cores, served, latencies, busy = [], [], [], [], []
    for r in range(args.rounds):
        one.append(bare_faiss_qps(index, queries, args.clients, args.k, window, 1))
        all_cores.append(bare_faiss_qps(index, queries, args.clients, args.k, window, cores))
        before, start = busy_seconds(args.port, name), time.perf_counter()
        qps, lat = asyncio.run(load(args.port, requests[r], args.clients, window))
        busy.append((busy_seconds(args.port, name) - before) / (time.perf_counter() - start))
        served.append(qps)
        latencies.append(lat)
    return {
        "one": one,
        "all": all_cores,
        "served": served,
        "latencies": np.concatenate(latencies),
        "busy": busy,
    }


def report(setting: str, result: dict, cores: int) -> tuple[float, float]:
    """Print one setting's figures; returns (ratio to the better bare faiss, p99/p50)."""
    one, all_cores = float(np.mean(result["one"])), float(np.mean(result["all"]))
    best, qps = max(one, all_cores), float(np.mean(result["served"]))
    lat = result["latencies"]
    p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)

    def windows(values: list[float]) -> str:
        return ", ".join(f"{x:.0f}" for x in values)

    print(
        f"[{setting}] bare faiss, 1 thread: {one:.0f} q/s ({windows(result['one'])}); {cores} threads: "
        f"{all_cores:.0f} q/s ({windows(result['all'])})"
    )
    print(
        f"[{setting}] ragym service: {qps:.0f} q/s ({windows(result['served'])}), p50={p50 * 1e3:.1f} ms "
        f"p99={p99 * 1e3:.1f} ms ({len(lat)} requests), index busy {np.mean(result['busy']):.0%}; "
        f"ratio={qps / best:.3f} p99/p50={p99 / p50:.2f}",
        flush=True,
    )
    return qps / best, p99 / p50


def floor_qps(args: argparse.Namespace, dim: int) -> dict[str, float]:
    """Service QPS over a tiny index of the same dimension (the HTTP floor), idle and beside the co-tenant; every
    window sends queries of its own (no cache hits), enough that no client runs out early."""
    manifest = recorded_index(args.floor_vectors, dim)
    count = 2 * args.rounds + 1
    encoded = encoded_requests("vec", unit_vectors(args.clients * 200 * count, dim, seed=3), args.k)
    windows = [encoded[i::count] for i in range(count)]
    seconds = args.seconds / args.rounds
    floors = {}
    with service(["--shards", f"vec={manifest}"], args.port + 1, shlex.split(args.serve_args)):
        asyncio.run(load(args.port + 1, windows[-1], args.clients, 30))  # warm-up
        floors["idle"] = float(
            np.mean(
                [
                    asyncio.run(load(args.port + 1, windows[r], args.clients, seconds))[0]
                    for r in range(args.rounds)
                ]
            )
        )
        with cotenants(args.cotenants, args.seconds + 60):
            floors[f"co-tenant x{args.cotenants}"] = float(
                np.mean(
                    [
                        asyncio.run(load(args.port + 1, windows[args.rounds + r], args.clients, seconds))[0]
                        for r in range(args.rounds)
                    ]
                )
            )
    return floors


def grpo_hit_rate(port: int, name: str, dim: int, args: argparse.Namespace) -> tuple[dict, float]:
    """Cache counters after a GRPO-like workload, and the share of its searches that repeat an earlier one
    (the best any cache can do). Each question's group of episodes searches concurrently: every episode
    searches its question's image (k=5, shared by the group), half of them reject and page on (k=10, shared
    among them), and each writes one query of its own (distinct); the data is seen ``--epochs`` times (the
    paper trains 2 epochs), with fresh own queries each time."""
    rng = np.random.default_rng(1)
    questions = unit_vectors(args.questions, dim, seed=2)
    requests, keys = [], []
    before = ready_status(port)["cache"]
    for _ in range(args.epochs):
        for image in questions:
            group = []
            for e in range(args.group_size):
                own = (image + 0.05 * rng.standard_normal(dim).astype(np.float32)).astype(np.float32)
                searches = [(image, 5)] + ([(image, 10)] if e % 2 else []) + [(own, 5)]
                keys += [(v.tobytes(), k) for v, k in searches]
                group += [
                    json.dumps(
                        {"retriever": name, "k": k, "query": {"f32": base64.b64encode(v.tobytes()).decode()}}
                    ).encode()
                    for v, k in searches
                ]
            requests.append([request_bytes("/search", b) for b in group])
    repeat_share = 1 - len(set(keys)) / len(keys)
    for group in requests:  # one group at a time, its episodes' searches concurrently
        asyncio.run(load(port, group, len(group), 60))
    after = ready_status(port)["cache"]
    counts = {key: after[key] - before[key] for key in ("hits", "joined", "misses")}
    counts["hit_rate"] = (counts["hits"] + counts["joined"]) / max(1, sum(counts.values()))
    return counts, repeat_share


def parse() -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-vectors", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--kb-dir", help="serve this KB's recorded entity index instead (retriever image)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=12.0, help="load time of each side per setting")
    parser.add_argument("--rounds", type=int, default=3, help="alternating bare-faiss / service windows")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--requests-per-client",
        type=int,
        default=120,
        help="distinct queries each client may send per window (enough that none runs out early)",
    )
    parser.add_argument("--cotenants", type=int, default=1, help="CPU-bound co-tenant processes")
    parser.add_argument("--serve-args", default="", help="extra ragym serve flags (a tuned setting)")
    parser.add_argument("--questions", type=int, default=32, help="GRPO workload: questions (0: skip)")
    parser.add_argument("--group-size", type=int, default=8, help="GRPO workload: episodes per question")
    parser.add_argument("--epochs", type=int, default=2, help="GRPO workload: passes over the questions")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--floor-vectors", type=int, default=1000, help="index size of the HTTP floor run")
    parser.add_argument("--no-floor", action="store_true", help="skip the HTTP floor run")
    return parser.parse_args()


def main() -> None:
    """Run both settings against one service process and print the figures, co-tenant last."""
    args = parse()
    serve_args, name, index = target(args)
    dim, cores = int(index.dim if hasattr(index, "dim") else index.index.d), available_cores()
    print(
        f"index: {serve_args[-1]} ({type(index).__name__}, {dim}-d); {args.clients} clients; k={args.k}; "
        f"{cores} cores; ragym serve {shlex.join([*serve_args, *shlex.split(args.serve_args)])}; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    num_windows = 2 * args.rounds + 1
    queries = unit_vectors(args.clients * args.requests_per_client * num_windows, dim, seed=1)
    encoded = encoded_requests(name, queries, args.k)
    per_window = [encoded[i::num_windows] for i in range(num_windows)]
    with service(serve_args, args.port, shlex.split(args.serve_args)) as log:
        asyncio.run(load(args.port, per_window[-1], args.clients, 60))  # warm-up, distinct queries
        threads = ready_status(args.port)["search_threads"]
        print(f"service: {logged_plan(log)}", flush=True)
        idle = measure(args, index, queries, per_window[: args.rounds], name)
        report("idle", idle, cores)
        with cotenants(args.cotenants, 3 * args.seconds + 60):
            busy = measure(args, index, queries, per_window[args.rounds : 2 * args.rounds], name)
        batches = ready_status(args.port)["batches"][name]
        print(
            f"service batches: mean {batches['mean_batch']:.1f} queries, largest {batches['largest_batch']}; "
            f"{threads['threads']} thread(s) per search"
        )
        if args.questions:
            cache, repeat = grpo_hit_rate(args.port, name, dim, args)
            print(
                f"replay cache, GRPO-like workload ({args.questions} questions x {args.group_size} episodes x "
                f"{args.epochs} epochs): hit_rate={cache['hit_rate']:.3f} of a possible {repeat:.3f} "
                f"(hits={cache['hits']} joined in flight={cache['joined']} misses={cache['misses']})"
            )
    print(
        f"load average {os.getloadavg()[0]:.1f} at the end; bare faiss OpenMP wait policy "
        f"{os.environ.get('OMP_WAIT_POLICY', 'default')}, faiss max threads {faiss.omp_get_max_threads()}"
    )
    floors = {} if args.no_floor else floor_qps(args, dim)
    for setting, floor in floors.items():
        print(f"[{setting}] HTTP floor ({args.floor_vectors} x {dim} index): {floor:.0f} q/s")
    ratio, spread = report(f"co-tenant x{args.cotenants}", busy, cores)
    print(f"ratio={ratio:.3f} p99/p50={spread:.2f} busy={np.mean(busy['busy']):.3f}")


if __name__ == "__main__":
    main()
