"""DocMemo's in-process query encoder when several env workers encode at once, beside a busy co-tenant.

Env workers (the local engine's and eval's threads, verl's agent-loop workers) encode DocMemo queries with
all-MiniLM-L6-v2 in process. torch's default gives each call one OpenMP thread per core, and OpenMP threads
spin while they wait for each other, so on a node other work keeps busy a call stalls. ragym's setting
(``ragym.envs.retrieval.page_encoders.cpu_encode_threads``): each query-encoder call with ``search_threads()`` torch threads
(one) in its own thread, calls concurrent. Both are measured in one run, alternating windows, with
``--workers`` threads each encoding one distinct query per call (a DocMemo round), idle and beside
``--cotenants`` bounded CPU-bound processes.

Usage: ``python benchmarks/page_encode.py [--workers 1 4 8] [--seconds 4] [--rounds 2] [--cotenants 1]``.
Last line: ``ratio=<ragym q/s / torch default q/s>`` at the most workers beside the co-tenant (> 1: ragym's
setting is faster; no collapse means the ragym column does not fall as workers grow).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402  (first: its OpenMP reads the wait policy now, before the import below sets one)

from benchmarks.retrieval_service import cotenants  # noqa: E402
from ragym.envs.retrieval import page_encoders as page_retrieval  # noqa: E402
from ragym.envs.retrieval.page_encoders import TextPageEncoder  # noqa: E402

_COUNTER = itertools.count()


def throughput(encoder: TextPageEncoder, workers: int, seconds: float) -> float:
    """Queries per second of ``workers`` threads each encoding one new query per call for ``seconds``."""
    deadline = time.perf_counter() + seconds
    done = [0] * workers

    def work(w: int) -> None:
        while time.perf_counter() < deadline:
            encoder.encode_queries([f"what was the revenue of segment {next(_COUNTER)} in the fiscal year"])
            done[w] += 1

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--seconds", type=float, default=4.0, help="each window")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cotenants", type=int, default=1)
    args = parser.parse_args()
    encoder = TextPageEncoder(cache_size=1_000_000)
    encoder.encode_queries(["warm up"])
    default_threads, ragym_setting = torch.get_num_threads(), page_retrieval.cpu_encode_threads

    def torch_default(device: str) -> nullcontext:
        return nullcontext()

    print(
        f"torch default: {default_threads} threads per call; ragym: {page_retrieval.search_threads()} "
        "per call (calls concurrent in both)"
    )
    ratio = 0.0
    for setting, count in (("idle", 0), (f"co-tenant x{args.cotenants}", args.cotenants)):
        budget = 2 * args.rounds * args.seconds * len(args.workers) + 30
        with cotenants(count, budget) if count else nullcontext():
            for workers in args.workers:
                rates = {"torch default": [], "ragym": []}
                for _ in range(args.rounds):
                    for name, context in (("torch default", torch_default), ("ragym", ragym_setting)):
                        page_retrieval.cpu_encode_threads = context
                        torch.set_num_threads(default_threads)
                        rates[name].append(throughput(encoder, workers, args.seconds))
                page_retrieval.cpu_encode_threads = ragym_setting
                base, ours = (sum(r) / len(r) for r in rates.values())
                ratio = ours / base
                print(
                    f"[{setting}] {workers} workers: torch default {base:.0f} q/s, ragym {ours:.0f} q/s "
                    f"(ratio {ratio:.2f}; windows {[round(x) for x in rates['torch default']]} / "
                    f"{[round(x) for x in rates['ragym']]})",
                    flush=True,
                )
    print(f"ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
