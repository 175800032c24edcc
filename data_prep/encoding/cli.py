"""Command line of the encoding step: ``encode`` items into shards, then ``index`` the shards.

    python -m ragym.data_prep.encoding encode --items items.jsonl --out DIR --encoder minilm [--ray ADDRESS]
    python -m ragym.data_prep.encoding index --encoded DIR --out INDEX_DIR [--exact-below N --recall-k 15]

A killed ``encode`` resumes where it stopped when run again with the same arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from ragym.data_prep.encoding.encoders import DTYPES, ROLES, EncoderSpec
from ragym.data_prep.encoding.index import IndexOptions
from ragym.data_prep.encoding.items import EncodingError, read_items
from ragym.data_prep.encoding.pipeline import EncodeConfig, encode_items


def _encode(args: argparse.Namespace) -> dict:
    spec = EncoderSpec(args.encoder, args.role, json.loads(args.encoder_kwargs), args.device, args.dtype)
    config = EncodeConfig(args.shard_size, args.batch_size, args.prefetch, args.num_workers, not args.quiet)
    ray = None
    if args.ray:
        ray = {"address": args.ray, "num_actors": args.num_actors, "gpus_per_actor": args.gpus_per_actor}
    with args.items.open("rb") as f:
        total = sum(1 for line in f if line.strip())  # for the progress bar's ETA
    manifest = encode_items(read_items(args.items), spec, args.out, config, total=total, ray=ray)
    return {"out": str(args.out), "num_items": manifest["num_items"], "num_shards": len(manifest["shards"])}


def _index(args: argparse.Namespace) -> dict:
    from ragym.data_prep.encoding.index import build_sharded_index

    names = (
        "exact_below",
        "recall_k",
        "max_shard_vectors",
        "transform",
        "code",
        "refine",
        "nprobe",
        "k_factor",
        "nlist",
        "target_recall",
        "train_size",
    )
    options = IndexOptions(**{name: getattr(args, name) for name in names})
    return build_sharded_index(args.encoded, args.out, options)


def main(argv: list[str]) -> int:
    """Parse ``argv`` and run ``encode`` or ``index``; prints a JSON summary."""
    parser = argparse.ArgumentParser(
        prog="python -m ragym.data_prep.encoding", description=(__doc__ or "").partition("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    enc = sub.add_parser("encode", help="items (JSON lines) -> vector shards")
    enc.add_argument("--items", type=Path, required=True, help='JSON lines of {"id", "text", "image"}')
    enc.add_argument("--out", type=Path, required=True, help="shard folder (rerun with it to resume)")
    enc.add_argument(
        "--encoder", required=True, help="pixel, eva_clip, minilm, e5, sentence, page_text, page_visual"
    )
    enc.add_argument("--role", default="passages", choices=ROLES)
    enc.add_argument("--encoder-kwargs", default="{}", help="JSON constructor arguments (model_path, ...)")
    enc.add_argument("--device", default="cpu")
    enc.add_argument("--dtype", default="float32", choices=DTYPES)
    enc.add_argument("--shard-size", type=int, default=EncodeConfig.shard_size)
    enc.add_argument("--batch-size", type=int, default=EncodeConfig.batch_size)
    enc.add_argument("--prefetch", type=int, default=EncodeConfig.prefetch)
    enc.add_argument("--num-workers", type=int, default=EncodeConfig.num_workers)
    enc.add_argument("--quiet", action="store_true", help="no progress bar")
    enc.add_argument("--ray", metavar="ADDRESS", help="run on the Ray cluster at ADDRESS as Ray Data actors")
    enc.add_argument("--num-actors", type=int, help="Ray actors (default: one per GPU, or per CPU)")
    enc.add_argument("--gpus-per-actor", type=float, help="default 1 when --device is cuda, else 0")
    idx = sub.add_parser("index", help="vector shards -> faiss index files and a manifest")
    idx.add_argument("--encoded", type=Path, required=True)
    idx.add_argument("--out", type=Path, required=True)
    idx.add_argument(
        "--exact-below",
        type=int,
        default=IndexOptions.exact_below,
        help="exact flat index below this many vectors",
    )
    idx.add_argument(
        "--recall-k", type=int, default=15, help="K of the recall@K measured against exact search"
    )
    idx.add_argument("--max-shard-vectors", type=int, default=50_000_000, help="vectors per index shard")
    idx.add_argument("--transform", default="", help="faiss pre-transform of a compressed index, e.g. PCA688")
    idx.add_argument(
        "--code", default=IndexOptions.code, help="faiss code in the IVF lists (RaBitQ2, RaBitQ3, PQ64x8...)"
    )
    idx.add_argument(
        "--refine",
        default=IndexOptions.refine,
        help="disk (exact re-ranking against float16 vectors read from disk), a faiss code held in memory "
        "(SQ8...), or none",
    )
    idx.add_argument(
        "--k-factor", type=int, default=IndexOptions.k_factor, help="candidates re-ranked per requested hit"
    )
    idx.add_argument(
        "--nprobe",
        type=int,
        default=IndexOptions.nprobe,
        help="IVF cells visited per query (0: the smallest that reaches --target-recall)",
    )
    idx.add_argument("--target-recall", type=float, default=IndexOptions.target_recall)
    idx.add_argument("--nlist", type=int, default=IndexOptions.nlist, help="IVF cells (0: 4 * sqrt(n))")
    idx.add_argument(
        "--train-size", type=int, default=IndexOptions.train_size, help="training vectors (0: 39 per cell)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        summary = _encode(args) if args.command == "encode" else _index(args)
    except (EncodingError, FileNotFoundError) as error:  # bad input: one line, no traceback
        print(f"python -m ragym.data_prep.encoding {args.command}: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0
