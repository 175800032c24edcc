"""``ragym prep``: real KB-VQA benchmarks into ragym KBs and verl rows, the training mix, and KB images.

    ragym prep infoseek|evqa|mmhops --raw DIR --out DIR [--limit N] [--image-encoder JSON] [--text-encoder JSON]
    ragym prep mix --out DIR infoseek=65000 evqa=67000 mmhops=17000 [--root DIR] [--seed S]
    ragym prep kb-images infoseek|evqa --raw DIR [--out DIR] [--workers N]   (MMhops-KB lists no URLs)
    ragym prep mragbench --raw DIR --out DIR [--limit N] [--corpus DIR]   (R3G task folder, see ragym.data_prep.mragbench)
    ragym prep bright --raw DIR --task biology --out DIR [--long] [--qrels FILE]   (MEMORA-v0, ragym.data_prep.bright)
    ragym prep mm-bright --raw DIR --domain academia --task 1|2 --out DIR [--descriptions FILE]

Each dataset run prints and saves ``OUT/report.json``: rows in = rows out + rows rejected per split, with a
count per reason, the KB and index sizes, and the image retriever's R@1 / R@5 / R@pool per split. Then every
prep prints the token budget report of a sample of the rows it wrote (``ragym budget``) at its env's paper recipe:
``--budget-recipe R`` picks another, ``--budget-rows N`` the sample (200), ``--no-budget-report`` skips it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from ragym.data_prep import evqa, infoseek, kb_images, mmhops
from ragym.data_prep.budget_report import print_budget_report, split_budget_args
from ragym.data_prep.kb_build import BuildConfig, build
from ragym.data_prep.kb_records import Report

DATASETS = ("infoseek", "evqa", "mmhops")
EVAL_SPLITS = {"infoseek": ("val",), "evqa": ("test", "val"), "mmhops": ("test", "validation")}
"""Each dataset's evaluation splits, the one the paper reports first (``mix`` copies the first found)."""


def _dataset_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--raw", required=True, type=Path, help="folder with the official files")
    parser.add_argument(
        "--out", required=True, type=Path, help="KB folder to write (must be empty or absent)"
    )
    parser.add_argument("--limit", type=int, help="read at most N rows per split")
    parser.add_argument(
        "--kb", type=Path, help="KB file (InfoSeek/E-VQA) or MMhops-KB folder, if not in --raw"
    )
    parser.add_argument(
        "--kb-images", type=Path, help="entity images from `prep kb-images` (default RAW/kb_images)"
    )
    parser.add_argument("--image-dir", type=Path, help="InfoSeek: OVEN image folder; E-VQA: landmarks folder")
    parser.add_argument("--inat-dir", type=Path, help="E-VQA: iNaturalist root")
    parser.add_argument("--kb-image-root", type=Path,
                        help="MMhops: the folder image_corpus.jsonl's image_path is relative to (default KB/image, "
                             "i.e. RAW/MMhops-KB/image without --kb)")  # fmt: skip
    parser.add_argument("--image-encoder", type=json.loads, default={"name": "pixel"},
                        help='JSON encoder spec, e.g. {"name": "eva_clip", "kwargs": {"model_path": ...}}')  # fmt: skip
    parser.add_argument(
        "--text-encoder", type=json.loads, help='e.g. {"name": "e5", "kwargs": {"model_path": ...}}'
    )
    parser.add_argument("--candidates-per-batch", type=int, default=5, help="K")
    parser.add_argument("--max-rejections", type=int, default=2, help="Rej_max")
    parser.add_argument(
        "--resume", action="store_true", help="reuse the finished vector shards of an earlier run"
    )


def _read(name: str, args: argparse.Namespace, report: Report) -> tuple[list, list, list]:
    if name == "infoseek":
        return (*infoseek.read(args.raw, report, args.limit, args.kb, args.image_dir), [])
    if name == "evqa":
        return (*evqa.read(args.raw, report, args.limit, args.kb, args.image_dir, args.inat_dir), [])
    return mmhops.read(args.raw, report, args.limit, args.kb, args.kb_image_root)


def prep_dataset(name: str, argv: list[str]) -> dict[str, Any]:
    """Read one benchmark and write its KB, rows and report; returns the report."""
    parser = argparse.ArgumentParser(prog=f"ragym prep {name}")
    _dataset_args(parser)
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()) and not args.resume:
        parser.error(f"{args.out} is not empty (pass --resume to continue an interrupted run there)")
    report = Report(name)
    articles, samples, loose = _read(name, args, report)
    cfg = BuildConfig(
        candidates_per_batch=args.candidates_per_batch,
        max_rejections=args.max_rejections,
        image_encoder=args.image_encoder,
        text_encoder=args.text_encoder,
        kb_images=args.kb_images or args.raw / "kb_images",
    )
    result = build(args.out, name, articles, samples, report, cfg, loose)
    _print_report(result)
    return result


def _print_report(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2, default=str))
    for split, row in result.get("recall", {}).items():
        figures = "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
        print(f"{result['dataset']} {split}: {figures}")
    if not result["balanced"]:
        raise RuntimeError("rows in != rows out + rows rejected; this is a bug in data_prep")


def mix(argv: list[str]) -> dict[str, Any]:
    """Sample the training mix (``name=N`` per dataset, seeded) into ``OUT/train.parquet`` and gather each
    dataset's evaluation rows into ``OUT/val.parquet``; rows keep their own KB and data source."""
    parser = argparse.ArgumentParser(prog="ragym prep mix")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("counts", nargs="+", help="dataset=N, e.g. infoseek=65000")
    parser.add_argument(
        "--root", type=Path, help="folder holding the prepared <dataset>/ KBs (default OUT/..)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = args.root or args.out.parent
    train, evals, summary = [], [], {}
    for item in args.counts:
        name, _, count = item.partition("=")
        if name not in DATASETS or not count.isdigit():
            parser.error(f"expected dataset=N with dataset in {DATASETS}, got {item!r}")
        data = root / name / "data"
        if not (data / "train.parquet").exists():
            parser.error(f"{data / 'train.parquet'} does not exist; run `ragym prep {name}` first")
        rows = pd.read_parquet(data / "train.parquet")
        take = rows.sample(n=min(int(count), len(rows)), random_state=args.seed)
        train.append(take)
        split = next((s for s in EVAL_SPLITS[name] if (data / f"{s}.parquet").exists()), None)
        if split is not None:
            evals.append(pd.read_parquet(data / f"{split}.parquet"))
        summary[name] = {"requested": int(count), "train_rows": len(take), "available": len(rows),
                         "eval_split": split, "eval_rows": len(evals[-1]) if split else 0}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    mixed = pd.concat(train).sample(frac=1.0, random_state=args.seed).reset_index(drop=True)
    mixed.to_parquet(args.out / "train.parquet")  # where the KB-VQA recipes read it: $RAGYM_DATA_DIR/kbvqa/
    if evals:
        pd.concat(evals).reset_index(drop=True).to_parquet(args.out / "val.parquet")
    (args.out / "mix.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return summary


def fetch_images(argv: list[str]) -> dict[str, int]:
    """Download the reference images the dataset's KB lists (resumable)."""
    parser = argparse.ArgumentParser(prog="ragym prep kb-images")
    parser.add_argument("dataset", choices=("infoseek", "evqa"))
    parser.add_argument("--raw", required=True, type=Path)
    parser.add_argument("--kb", type=Path)
    parser.add_argument("--out", type=Path, help="default RAW/kb_images (where `ragym prep` looks)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--retries", type=int, default=3)
    args = parser.parse_args(argv)
    reader = infoseek if args.dataset == "infoseek" else evqa
    urls = reader.image_urls(args.raw, args.kb)
    cfg = kb_images.DownloadConfig(workers=args.workers, retries=args.retries)
    counts = kb_images.download(urls, args.out or args.raw / "kb_images", cfg)
    print(json.dumps(counts))
    return counts


def main(argv: list[str]) -> int:
    """``ragym prep SUBCOMMAND ...``."""
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    rest, budget = split_budget_args(rest)
    status = _run(command, rest)
    if status == 0 and command != "kb-images":
        print_budget_report(command, _written_rows(command, rest), budget)
    return status


def _run(command: str, rest: list[str]) -> int:
    """Run one prep subcommand; its exit status."""
    if command in DATASETS:
        try:
            prep_dataset(command, rest)
        # Files ragym cannot read as the dataset: one line, no traceback (as the encoding command does).
        except mmhops.ShardSchemaError as err:
            print(f"ragym prep {command}: {err}", file=sys.stderr)
            return 2
    elif command == "mix":
        mix(rest)
    elif command == "kb-images":
        fetch_images(rest)
    elif command in (
        "bright",
        "mm-bright",
    ):  # MEMORA's benchmarks: a corpus and MEMORA-v0 rows (ragym.data_prep.bright)
        from ragym.data_prep import bright

        return bright.main(command, rest)
    elif command == "mragbench":  # R3G's benchmark: its own task-folder layout (ragym.data_prep.mragbench)
        from ragym.data_prep import mragbench

        return mragbench.main(rest)
    else:
        print(f"ragym prep: unknown subcommand {command!r}\n{__doc__}", file=sys.stderr)
        return 2
    return 0


def _written_rows(command: str, rest: list[str]) -> list[Path]:
    """The parquet rows a finished prep wrote: ``OUT/train.parquet`` and ``OUT/val.parquet`` for ``mix``,
    ``OUT/data/*.parquet`` for the others."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_known_args(rest)[0].out
    if command == "mix":
        return [out / "train.parquet", out / "val.parquet"]
    return sorted((out / "data").glob("*.parquet"))
