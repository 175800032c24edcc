"""The retriever commands' lines (``ragym train-retriever``, ``ragym retriever-demo``), importable without torch or
sentence-transformers.

``ragym``'s dispatcher parses them before the training modules load (about 6 s of imports), so ``--help`` and a
usage error take a moment; each command's ``main`` parses with the same function.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ragym.rl.retriever.config import REPO_ROOT

_OVERRIDE = re.compile(r"[A-Za-z_]\w*\.[\w.]+=")
"""A ``section.key=value`` recipe override, as opposed to a file path."""

SKEPTICS_JSONL = REPO_ROOT.parent / "shared" / "data" / "stackexchange_skeptics" / "web_science_dataset.jsonl"
"""The shared Skeptics pairs (outside the repository; never copied into it)."""


def parse_train_retriever_args(argv: list[str] | None) -> argparse.Namespace:
    """``ragym train-retriever --recipe R [--ablation] [--no-export] [--bright C Q [R]] [section.key=value ...]``."""
    parser = argparse.ArgumentParser(
        prog="ragym train-retriever",
        description="train MEMORA-R, evaluate it, export model + faiss index",
    )
    parser.add_argument("--recipe", required=True, help="path, or name under recipes/retriever/")
    parser.add_argument(
        "--ablation", action="store_true", help="run Table 4 rows instead of one training run"
    )
    parser.add_argument("--no-export", action="store_true", help="skip the faiss export")
    parser.add_argument(
        "overrides", nargs="*", metavar="SECTION.KEY=VALUE", help="recipe overrides, e.g. train.max_steps=1"
    )
    parser.add_argument(
        "--bright",
        nargs="+",
        metavar="FILE",
        help="also evaluate on a BRIGHT task: CORPUS QUERIES [QRELS] (no QRELS: the queries' gold_ids, as BRIGHT's "
        "run.py)",
    )
    args = parser.parse_args(argv)
    if args.bright:
        # The files take every item after --bright: section.key=value items there are the overrides.
        num_files = next((i for i, item in enumerate(args.bright) if _OVERRIDE.match(item)), len(args.bright))
        args.overrides += args.bright[num_files:]
        args.bright = args.bright[:num_files]
        if len(args.bright) not in (2, 3):
            parser.error(f"--bright takes CORPUS QUERIES [QRELS]: 2 or 3 files, got {len(args.bright)}")
    return args


def parse_retriever_demo_args(argv: list[str] | None) -> argparse.Namespace:
    """``ragym retriever-demo --out DIR [--input FILE] [--recipe R] [--max-steps N] [--limit N] [--export]``."""
    parser = argparse.ArgumentParser(
        prog="ragym retriever-demo", description="MEMORA-R on CPU in minutes, from the shared Skeptics pairs"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--input", type=Path, default=SKEPTICS_JSONL, help="Skeptics jsonl or Posts.xml")
    parser.add_argument("--recipe", default="memora_r_cpu", help="retriever recipe (name or path)")
    parser.add_argument("--max-steps", type=int, default=12, help="optimiser steps per trained row")
    parser.add_argument("--limit", type=int, help="read only the first N input rows")
    parser.add_argument("--export", action="store_true", help="also export the full model + faiss index")
    return parser.parse_args(argv)
