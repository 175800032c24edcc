"""``ragym prep NAME``: every dataset ragym trains or evaluates on, from its official files to verl rows.

    ragym prep --list                      the registered preps, one a line
    ragym prep NAME --help                 one prep's options

The registry ``PREPS`` below names each prep's function: real KB-VQA benchmarks (infoseek, evqa, mmhops) into
KBs and rows, the training mix, KB images, MRAG-Bench (R3G), BRIGHT and MM-BRIGHT (MEMORA), MMLongBench-Doc
(DocMemo), Stack Exchange pairs (MEMORA-R), the synthetic KB of the CPU demo, a KB's image pack.

Each dataset run prints and saves ``OUT/report.json``: rows in = rows out + rows rejected, with a count per
reason. The ``ragym prep`` command (``ragym.rl.prep``) then prints the token budget report of a sample of the
rows a prep wrote (preps registered with ``budget=True``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ragym.data_prep import evqa, infoseek, kb_images, mmhops
from ragym.data_prep.kb_build import BuildConfig, NoUsableArticle, build
from ragym.data_prep.report import PrepReport, UnreadableFile, parquet_num_rows, row_limit

DATASETS = ("infoseek", "evqa", "mmhops")
EVAL_SPLITS = {"infoseek": ("val",), "evqa": ("test", "val"), "mmhops": ("test", "validation")}
"""Each dataset's evaluation splits, the one the paper reports first (``mix`` copies the first found with rows)."""


def _dataset_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--raw", required=True, type=Path, help="folder with the official files")
    parser.add_argument(
        "--out", required=True, type=Path, help="KB folder to write (must be empty or absent)"
    )
    parser.add_argument("--limit", type=row_limit, help="read at most N rows per split")
    parser.add_argument(
        "--kb", type=Path, help="KB file (InfoSeek/E-VQA) or MMhops-KB folder, if not in --raw"
    )
    parser.add_argument(
        "--kb-images", type=Path, help="entity images from `prep kb-images` (default RAW/kb_images)"
    )
    parser.add_argument("--image-dir", type=Path, help="InfoSeek: OVEN image folder; E-VQA: landmarks folder")
    parser.add_argument("--inat-dir", type=Path, help="E-VQA: iNaturalist root")
    parser.add_argument(
        "--kb-image-root",
        type=Path,
        help="MMhops: the folder image_corpus.jsonl's image_path is relative to (default KB/image, "
        "i.e. RAW/MMhops-KB/image without --kb)",
    )
    parser.add_argument(
        "--image-encoder",
        type=json.loads,
        default={"name": "pixel"},
        help='JSON encoder spec, e.g. {"name": "eva_clip", "kwargs": {"model_path": ...}}',
    )
    parser.add_argument(
        "--text-encoder", type=json.loads, help='e.g. {"name": "e5", "kwargs": {"model_path": ...}}'
    )
    parser.add_argument("--candidates-per-batch", type=int, default=5, help="K")
    parser.add_argument("--max-rejections", type=int, default=2, help="Rej_max")
    parser.add_argument(
        "--resume", action="store_true", help="reuse the finished vector shards of an earlier run"
    )


def _read(name: str, args: argparse.Namespace, report: PrepReport, spool: Path) -> tuple[list, list, list]:
    """The dataset's articles, samples and loose passages; MMhops' query images go to files under ``spool``."""
    if name == "infoseek":
        return (*infoseek.read(args.raw, report, args.limit, args.kb, args.image_dir), [])
    if name == "evqa":
        return (*evqa.read(args.raw, report, args.limit, args.kb, args.image_dir, args.inat_dir), [])
    return mmhops.read(args.raw, report, args.limit, args.kb, args.kb_image_root, spool)


def prep_dataset(name: str, argv: list[str]) -> dict[str, Any]:
    """Read one benchmark and write its KB, rows and report; returns the report."""
    parser = argparse.ArgumentParser(prog=f"ragym prep {name}")
    _dataset_args(parser)
    args = parser.parse_args(argv)
    # The KB stores (Rej_max + 1) x K candidates per query image: a K below 1 or a Rej_max below 0 was faiss's
    # AssertionError (a traceback) once the KB's images were encoded.
    if args.candidates_per_batch < 1 or args.max_rejections < 0:
        parser.error(
            "--candidates-per-batch must be >= 1 and --max-rejections >= 0, got "
            f"{args.candidates_per_batch} and {args.max_rejections}"
        )
    if args.out.exists() and any(args.out.iterdir()) and not args.resume:
        parser.error(f"{args.out} is not empty (pass --resume to continue an interrupted run there)")
    for flag in ("image_dir", "inat_dir", "kb_image_root", "kb_images"):
        folder = getattr(args, flag)
        # A wrong path would reject every row as missing_image (or show every entity as a placeholder).
        if folder is not None and not folder.is_dir():
            raise FileNotFoundError(f"--{flag.replace('_', '-')} {folder} is not a folder")
    report = PrepReport(name)
    # MMhops' query images are spooled to files as their rows are read, beside OUT (so build hard-links them
    # into OUT/queries), and removed at the end: the dataset's images are never all in memory.
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent, prefix=".ragym-prep-images-") as spool:
        return _build(name, args, report, Path(spool))


def _build(name: str, args: argparse.Namespace, report: PrepReport, spool: Path) -> dict[str, Any]:
    """Read the dataset (spooling under ``spool``), build its KB and rows, print the report; returns it."""
    articles, samples, loose = _read(name, args, report, spool)
    cfg = BuildConfig(
        candidates_per_batch=args.candidates_per_batch,
        max_rejections=args.max_rejections,
        image_encoder=args.image_encoder,
        text_encoder=args.text_encoder,
        kb_images=args.kb_images or args.raw / "kb_images",
    )
    try:
        result = build(args.out, name, articles, samples, report, cfg, loose)
    except NoUsableArticle:
        print(report.format())  # why each KB entry was rejected
        raise
    print(report.format())
    for split, row in result["details"].get("recall", {}).items():
        figures = "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
        print(f"{result['dataset']} {split}: {figures}")
    for line in without_gold_lines(result):
        print(line)
    return result


NO_GOLD_EFFECT = (
    "no verification reward, reachability filter, Ident. or retriever rank applies, so a training row trains on "
    "the outcome and format terms only and an evaluation row is scored on its answer alone (docs/data.md)"
)
"""What a row without a gold entity means, printed beside its count."""


def without_gold_lines(report: dict[str, Any]) -> list[str]:
    """One line per split with rows written without a gold entity: how many, and what that means."""
    counts = report["details"].get("rows_without_gold", {})
    return [
        f"{report['dataset']} {split}: {n} rows without a gold entity: {NO_GOLD_EFFECT}"
        for split, n in counts.items()
    ]


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
        if rows.empty and int(count) > 0:  # every training row was rejected (or the split had none)
            parser.error(f"{data / 'train.parquet'} has no rows; {root / name / 'report.json'} says why")
        take = rows.sample(n=min(int(count), len(rows)), random_state=args.seed)
        train.append(take)
        split = next(
            (s for s in EVAL_SPLITS[name] if (p := data / f"{s}.parquet").exists() and parquet_num_rows(p)),
            None,
        )
        if split is not None:
            evals.append(pd.read_parquet(data / f"{split}.parquet"))
        summary[name] = {
            "requested": int(count),
            "train_rows": len(take),
            "available": len(rows),
            "eval_split": split,
            "eval_rows": len(evals[-1]) if split else 0,
        }
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


@dataclass(frozen=True)
class Prep:
    """One registered data preparation."""

    target: str
    """``module:function``; called as ``function(*args, argv)``, it returns the exit status or its report (a
    dict: success)."""
    help: str
    """One line for ``ragym prep --list``."""
    args: tuple[str, ...] = ()
    """Leading arguments of the function (the dataset name, for functions that serve several)."""
    budget: bool = True
    """Whether it writes verl rows, which the token budget report then samples."""


PREPS: dict[str, Prep] = {
    "infoseek": Prep(f"{__name__}:run_dataset", "InfoSeek -> KB-VQA KB and rows", ("infoseek",)),
    "evqa": Prep(f"{__name__}:run_dataset", "Encyclopedic-VQA -> KB-VQA KB and rows", ("evqa",)),
    "mmhops": Prep(f"{__name__}:run_dataset", "MMhops-R -> KB-VQA KB and rows", ("mmhops",)),
    "mix": Prep(f"{__name__}:mix", "the KB-VQA training mix (dataset=N each) and the evaluation rows"),
    "kb-images": Prep(f"{__name__}:fetch_images", "download InfoSeek / E-VQA KB images", budget=False),
    "mragbench": Prep("ragym.data_prep.mragbench:main", "MRAG-Bench -> R3G task folder and rows"),
    "bright": Prep("ragym.data_prep.bright:main", "BRIGHT -> MEMORA-v0 corpus and rows", ("bright",)),
    "mm-bright": Prep(
        "ragym.data_prep.bright:main", "MM-BRIGHT -> MEMORA-v0 corpus and rows", ("mm-bright",)
    ),
    "mmlongbench-doc": Prep(
        "ragym.data_prep.mmlongbench_doc:main", "MMLongBench-Doc -> DocMemo stores and rows"
    ),
    "stackexchange": Prep(
        "ragym.data_prep.stackexchange:main", "Stack Exchange -> MEMORA-R training pairs", budget=False
    ),
    "synthetic-kb": Prep(
        "ragym.data_prep.synthetic_kb:main", "the synthetic KB-VQA KB and rows", budget=False
    ),
    "image-pack": Prep(
        "ragym.envs.image_pack:main", "a KB's entity images, decoded once, packed", budget=False
    ),
}
"""Every dataset ``ragym prep NAME`` prepares; a new benchmark's prep adds one line here."""


def prep_main(name: str) -> Callable[..., int]:
    """The function that runs ``ragym prep NAME`` (imports its module)."""
    module, _, function = PREPS[name].target.partition(":")
    return getattr(importlib.import_module(module), function)


def _usage() -> str:
    width = max(map(len, PREPS))
    lines = ["usage: ragym prep NAME [ARGS...] | ragym prep --list", "", "preps:"]
    return "\n".join(lines + [f"  {name.ljust(width)}  {prep.help}" for name, prep in PREPS.items()])


def main(argv: list[str]) -> int:
    """Run one registered prep (``NAME ARGS...``; ``--help``, ``--list``); its exit status, 2 with one line for an
    input file it cannot read (``UnreadableFile``, from any prep). ``ragym prep`` (``ragym.rl.prep``) runs this,
    then the token budget report of the rows it wrote."""
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    if argv[0] == "--list":
        print("\n".join(PREPS))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in PREPS:
        print(f"ragym prep: unknown prep {name!r}\n{_usage()}", file=sys.stderr)
        return 2
    try:
        result = prep_main(name)(*PREPS[name].args, rest)
    except (
        UnreadableFile
    ) as err:  # an input file none of whose rows can be counted: one line, nothing written
        print(f"ragym prep {name}: {err}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


def run_dataset(name: str, argv: list[str]) -> int:
    """``ragym prep infoseek|evqa|mmhops``; files ragym cannot read as the dataset are one line, no traceback."""
    try:
        prep_dataset(name, argv)
    except (mmhops.ShardSchemaError, NoUsableArticle) as err:
        print(f"ragym prep {name}: {err}", file=sys.stderr)
        return 2
    return 0


def written_rows(name: str, rest: list[str]) -> list[Path]:
    """The parquet rows a finished prep wrote: ``OUT/train.parquet`` and ``OUT/val.parquet`` for ``mix``,
    ``OUT/data/*.parquet`` for the others."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_known_args(rest)[0].out
    if name == "mix":
        return [out / "train.parquet", out / "val.parquet"]
    return sorted((out / "data").glob("*.parquet"))
