"""The encoding step at speed and the compressed index at scale, each against its baseline in the same run.

1. Index: ``--num-vectors`` (default 1M) 768-d synthetic embeddings of make-up ``--make-up``
   (``ragym.data_prep.encoding.clustered.MAKE_UPS``: ``hierarchical``, calibrated to real embeddings' neighbour
   statistics, or the earlier ``gaussian128``) written as encoded shards, indexed by ``build_sharded_index``;
   prints the index's memory against the exact flat index and its recall@15 against exact top-15
   (``--queries`` stored vectors as queries, themselves excluded). Goal: recall >= 0.95 at <= 1/8 of the
   exact memory (everything held in memory counts: codes, ids, centroids, transforms, refine codes). With
   ``--refine disk`` the full vectors stay on disk (float16) and re-rank ``k_factor * 15`` candidates per
   query: the line also prints those bytes on disk, and the latency per query with the refine file in the
   page cache (warm) and dropped from it before each batch (cold, ``posix_fadvise(DONTNEED)``).
2. Pipeline: items/s of the whole step (read JSON lines, tokenise on the prefetch thread, forward, write
   shards) against the bare forward pass over the same pre-tokenised batches, with a tiny BERT sentence
   encoder built from config. Runs alternate (pipeline, bare, bare, pipeline, ...) so load drift hits both.
   Last line: ``ratio=<pipeline/bare>``, the median of adjacent-pair ratios; goal >= 0.9.

    python benchmarks/prep_encode.py [--make-up hierarchical --num-vectors 1000000 --queries 500]
        [--code RaBitQ3 --refine none] [--num-items 2048 --repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ragym.data_prep.encoding import EncodeConfig, Item, encode_items, read_items, shards, write_items
from ragym.data_prep.encoding.clustered import MAKE_UPS, make_generator
from ragym.data_prep.encoding.encoders import SentenceItems
from ragym.data_prep.encoding.index import (
    IndexOptions,
    VectorBlocks,
    build_sharded_index,
    load_sharded_index,
    search_shards,
)
from ragym.data_prep.encoding.tiny import build_tiny_text_encoder
from ragym.envs.retrieval.retrievers import RefineVectors

WORDS = "the museum river bridge painter tower garden station history built century north city".split()


def write_clustered(root: Path, num: int, make_up: str, block: int = 65536) -> None:
    """``num`` synthetic vectors of ``make_up`` as an encoded-shards folder (one shard per generated block)."""
    shards.check_config(
        root, {"encoder": {"object": f"synthetic-{make_up}"}, "shard_size": block, "batch_size": block}
    )
    generator = make_generator(make_up)
    counts = []
    for index, vectors in enumerate(generator.blocks(num, block)):
        shards.write_shard(
            root, index, [f"v{index * block + i}" for i in range(len(vectors))], vectors, False
        )
        counts.append(len(vectors))
    shards.write_manifest(root, counts, vectors.shape[1])


def write_array(root: Path, vectors: np.ndarray, block: int = 65536) -> None:
    """Real embeddings from a ``.npy`` as an encoded-shards folder."""
    shards.check_config(root, {"encoder": {"object": "array"}, "shard_size": block, "batch_size": block})
    counts = []
    for index, start in enumerate(range(0, len(vectors), block)):
        part = vectors[start : start + block]
        shards.write_shard(root, index, [f"v{start + i}" for i in range(len(part))], part, False)
        counts.append(len(part))
    shards.write_manifest(root, counts, vectors.shape[1])


def index_benchmark(args: argparse.Namespace, tmp: Path) -> None:
    start = time.perf_counter()
    if args.vectors:
        vectors = np.ascontiguousarray(np.load(args.vectors)[: args.num_vectors], dtype=np.float32)
        write_array(tmp / "vectors", vectors)
        args.num_vectors, args.make_up = len(vectors), Path(args.vectors).name
        print(f"read {vectors.shape[0]} x {vectors.shape[1]} vectors from {args.vectors}")
    else:
        write_clustered(tmp / "vectors", args.num_vectors, args.make_up)
        print(
            f"generated {args.num_vectors} x 768 {args.make_up} vectors in {time.perf_counter() - start:.0f}s"
        )
    for refine in args.refine:
        options = IndexOptions(
            exact_below=min(IndexOptions.exact_below, args.num_vectors),
            code=args.code,
            refine=refine,
            transform=args.transform,
            num_eval_queries=args.queries,
            k_factor=args.k_factor,
            nprobe=args.nprobe,
            nlist=args.nlist,
        )
        start = time.perf_counter()
        m = build_sharded_index(tmp / "vectors", tmp / f"index-{refine}", options)
        built = time.perf_counter() - start
        disk = ""
        if m["refine"] == "disk":
            disk = (
                f", refine vectors on disk {m['refine_disk_bytes'] / 2**20:.0f} MiB = "
                f"{m['refine_disk_ratio']:.3f} of exact"
            )
        print(
            f"{args.make_up}: index {m['factory']} refine={m['refine']} nprobe={m['search']['nprobe']} "
            f"k_factor={options.k_factor}: memory {m['memory_bytes'] / 2**20:.0f} MiB = "
            f"{m['memory_ratio']:.3f} of exact ({m['exact_memory_bytes'] / 2**20:.0f} MiB){disk}, "
            f"recall@15 {m['recall@15']:.3f} ({m['recall_eval']['num_queries']} queries), built in "
            f"{built:.0f}s",
            flush=True,
        )
        for batch in (1, 64):
            latency(tmp / f"index-{refine}", tmp / "vectors", args.queries, batch)


def _drop_from_page_cache(folder: Path) -> None:
    """Ask the kernel to drop the refine files' cached pages (clean pages go; no root needed)."""
    for path in folder.glob("*.refine.npy"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def latency(folder: Path, encoded: Path, num_queries: int, batch: int = 1) -> None:
    """ms per query of searches ``batch`` queries at a time (1: the env's pattern; 64: a retrieval service's
    batch), refine files cached (warm) and dropped before each batch (cold)."""
    manifest, indexes, _ = load_sharded_index(folder)
    rng = np.random.default_rng(7)
    rows = np.sort(rng.choice(manifest["num_vectors"], size=min(num_queries, 200 * batch), replace=False))
    queries = VectorBlocks.from_encoded(encoded).rows(rows)
    figures = {}
    modes = (("warm", False), ("cold", True)) if manifest["refine"] == "disk" else (("warm", False),)
    for name, cold in modes:
        if name == "warm":  # one untimed pass: the index and these queries' refine rows in the page cache
            for start in range(0, len(queries), batch):
                search_shards(indexes, queries[start : start + batch], 15)
        seconds = 0.0
        for start in range(0, len(queries), batch):
            if cold:  # a page mapped by this process stays cached: unmap, drop, map again
                for _, index in indexes:
                    index.vectors = None
                _drop_from_page_cache(folder)
                for (_, index), record in zip(indexes, manifest["shards"], strict=True):
                    index.vectors = RefineVectors(folder / record["refine"])
            begin = time.perf_counter()
            search_shards(indexes, queries[start : start + batch], 15)
            seconds += time.perf_counter() - begin
        figures[name] = 1000 * seconds / len(queries)
    print(
        f"search {batch} {'query' if batch == 1 else 'queries'} at a time, ms per query: "
        + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
        flush=True,
    )


def _texts(num: int, seed: int = 0) -> list[Item]:
    rng = np.random.default_rng(seed)
    return [Item(f"p{i}", " ".join(rng.choice(WORDS, size=int(rng.integers(40, 80))))) for i in range(num)]


def pipeline_benchmark(args: argparse.Namespace, tmp: Path) -> float:
    model_dir = build_tiny_text_encoder(tmp / "tiny", hidden=args.hidden, layers=args.layers)
    from sentence_transformers import SentenceTransformer

    encoder = SentenceItems(SentenceTransformer(str(model_dir), device="cpu"))
    items = _texts(args.num_items)
    write_items(tmp / "items.jsonl", items)
    batches = [
        encoder.preprocess(items[s : s + args.batch_size]) for s in range(0, len(items), args.batch_size)
    ]
    config = EncodeConfig(shard_size=args.batch_size * 16, batch_size=args.batch_size, progress=False)
    encoder.forward(batches[0])  # warm-up

    def bare() -> float:
        start = time.perf_counter()
        for batch in batches:
            encoder.forward(batch)
        return len(items) / (time.perf_counter() - start)

    def pipeline(run: int) -> float:
        start = time.perf_counter()
        encode_items(read_items(tmp / "items.jsonl"), encoder, tmp / f"out-{run}", config)
        return len(items) / (time.perf_counter() - start)

    ratios = []
    for run in range(args.repeats):
        if run % 2 == 0:
            ours, base = pipeline(run), bare()
        else:
            base, ours = bare(), pipeline(run)
        ratios.append(ours / base)
        print(
            f"run {run}: pipeline {ours:.0f} items/s, bare forward {base:.0f} items/s, ratio {ours / base:.3f}"
        )
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-vectors", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=500, help="stored vectors used as recall queries")
    parser.add_argument("--make-up", default=next(iter(MAKE_UPS)), choices=list(MAKE_UPS))
    parser.add_argument("--vectors", help="index real embeddings from this .npy instead of a make-up")
    parser.add_argument(
        "--transform", default=IndexOptions.transform, help="faiss pre-transform, e.g. PCA688"
    )
    parser.add_argument("--code", default=IndexOptions.code, help="faiss code in the IVF lists")
    parser.add_argument("--refine", nargs="+", default=[IndexOptions.refine], help="refine codes to compare")
    parser.add_argument("--nprobe", type=int, default=IndexOptions.nprobe, help="0: tuned at build time")
    parser.add_argument("--nlist", type=int, default=IndexOptions.nlist, help="IVF cells (0: 4 * sqrt(n))")
    parser.add_argument("--k-factor", type=int, default=IndexOptions.k_factor)
    parser.add_argument("--skip-index", action="store_true")
    parser.add_argument("--skip-pipeline", action="store_true")
    parser.add_argument("--num-items", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="ragym-prep-encode-") as tmp:
        if not args.skip_index:
            index_benchmark(args, Path(tmp))
        if not args.skip_pipeline:
            print(f"ratio={pipeline_benchmark(args, Path(tmp)):.3f}")


if __name__ == "__main__":
    main()
