"""Compressed-index candidates on synthetic embeddings: memory against the exact index and recall@15 against
exact top-15, each candidate built and measured in the same run on the same vectors and queries.

Memory counts everything the serialized index holds (codes, ids, coarse centroids, codebooks, transforms,
refine codes). Queries are stored vectors, each excluded from its own results, as in
``ragym.data_prep.encoding.index``. One line per candidate (factory, nprobe, k_factor). With ``--disk-refine`` each
candidate is measured a second time with its ``k_factor * 15`` candidates re-ranked exactly against float16
full vectors (``ragym.envs.retrieval.retrievers.DiskRefinedIndex``, what ``refine="disk"`` reads from disk): memory is the
same faiss bytes, and the line adds the refine vectors' share of the exact size.

    OMP_NUM_THREADS=1 python benchmarks/index_sweep.py --make-up hierarchical --num 200000 \\
        --factory "IVF1024,PQ64x8,Refine(PQ256x8)" --nprobe 32 --k-factor 8
"""

from __future__ import annotations

import argparse
import itertools
import time

import faiss
import numpy as np

from ragym.data_prep.encoding.clustered import MAKE_UPS, make_generator
from ragym.data_prep.encoding.index import no_polysemous_training
from ragym.envs.retrieval.retrievers import DiskRefinedIndex, normalise, set_search_params

K = 15


def recall(found: np.ndarray, truth: np.ndarray, rows: np.ndarray) -> float:
    """Mean recall@K of ``found`` against ``truth`` (both (Q, K+1) rows), each query's own row dropped."""
    hits = []
    for row, t, f in zip(rows, truth, found, strict=True):
        t_set = [r for r in t if r != row][:K]
        f_set = [r for r in f if r != row and r >= 0][:K]
        hits.append(len(set(t_set) & set(f_set)) / K)
    return float(np.mean(hits))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make-up", default=next(iter(MAKE_UPS)), choices=list(MAKE_UPS))
    parser.add_argument("--num", type=int, default=200_000)
    parser.add_argument("--vectors", help="a .npy of real embeddings to use instead of a synthetic make-up")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--train-size", type=int, default=65_536)
    parser.add_argument("--factory", nargs="+", required=True, help="faiss index_factory strings")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[32])
    parser.add_argument("--k-factor", type=int, nargs="+", default=[8])
    parser.add_argument("--query-bits", type=int, nargs="+", default=[8], help="RaBitQ query quantization")
    parser.add_argument(
        "--disk-refine", action="store_true", help="also re-rank exactly from float16 vectors"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    if args.vectors:
        vectors = normalise(np.load(args.vectors)[: args.num])
        args.num, args.make_up = len(vectors), args.vectors
    else:
        vectors = np.concatenate(list(make_generator(args.make_up).blocks(args.num)))  # (num, 768)
    rng = np.random.default_rng(1)
    rows = np.sort(rng.choice(args.num, size=args.queries, replace=False))
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(vectors)
    truth = exact.search(vectors[rows], K + 1)[1]
    exact_bytes = vectors.nbytes
    print(
        f"{args.make_up}: {args.num} x {vectors.shape[1]} vectors and exact top-{K} in "
        f"{time.perf_counter() - start:.0f}s",
        flush=True,
    )
    train = vectors[np.sort(np.random.default_rng(0).choice(args.num, args.train_size, replace=False))]
    for factory in args.factory:
        start = time.perf_counter()
        index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
        no_polysemous_training(index)
        index.train(train)
        index.add(vectors)
        built = time.perf_counter() - start
        memory = len(faiss.serialize_index(index))
        searched = [("", index)]
        if args.disk_refine:
            searched.append(("+disk", DiskRefinedIndex(index, vectors.astype(np.float16))))
        for (suffix, searcher), nprobe, k_factor, bits in itertools.product(
            searched, args.nprobe, args.k_factor, args.query_bits
        ):
            set_search_params(searcher, {"nprobe": nprobe, "k_factor": k_factor, "query_bits": bits})
            start = time.perf_counter()
            found = searcher.search(vectors[rows], K + 1)[1]
            per_query_ms = 1000 * (time.perf_counter() - start) / len(rows)
            disk = ", refine vectors on disk 0.500 of exact" if suffix else ""
            print(
                f"{factory + suffix:<40} nprobe={nprobe:<4} k_factor={k_factor:<3} qb={bits} memory "
                f"{memory / exact_bytes:.3f} of exact{disk}, recall@{K} {recall(found, truth, rows):.3f}, "
                f"built {built:.0f}s, {per_query_ms:.1f} ms/query",
                flush=True,
            )


if __name__ == "__main__":
    main()
