"""``ragym prep infoseek`` at scale: wall time and peak memory over generated official-format rows.

Generates ``--rows`` InfoSeek val rows (``infoseek_val.jsonl`` + withkb, official field names), a Wiki6M-format
KB of ``--entities`` articles and 50 query images, then runs the prep (CPU ``pixel`` features, BM25) once at
``--rows / 5`` and once at ``--rows``, each in a fresh process, and prints per run: seconds, the process's peak
resident memory and Python's traced peak (``tracemalloc``, with ``--trace``: slower), and the last line the
growth per extra row between the two runs. A prep that streams grows by about the size of what it keeps per
row; one that holds every row twice grows by twice that.

    python benchmarks/prep_scale.py [--rows 100000 --entities 200 --trace]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def generate(raw: Path, rows: int, entities: int) -> None:
    """Official-format InfoSeek files (DATASETS.md 1a, 1b, 1c, 1e) under ``raw``."""
    from PIL import Image

    (raw / "images").mkdir(parents=True)
    with open(raw / "Wiki6M_ver_1_0.jsonl", "w", encoding="utf-8") as f:
        for i in range(entities):
            f.write(
                json.dumps(
                    {
                        "wikidata_id": f"Q{i + 1}",
                        "wikipedia_title": f"Entity {i}",
                        "wikipedia_content": f"Entity {i} is a thing. " * 40,
                        "wikipedia_summary": "",
                        "wikipedia_image_url": None,
                    }
                )
                + "\n"
            )
    for i in range(50):
        colour = (i * 5, 255 - i * 5, (i * 37) % 256)
        Image.new("RGB", (32, 32), colour).save(raw / "images" / f"oven_{i:08d}.jpg")
    with open(raw / "infoseek_val.jsonl", "w") as qa, open(raw / "infoseek_val_withkb.jsonl", "w") as kb:
        for r in range(rows):
            data_id = f"infoseek_val_{r:08d}"
            row = {
                "data_id": data_id,
                "image_id": f"oven_{r % 50:08d}",
                "question": f"What is this {r}?",
                "answer": ["x"],
                "answer_eval": ["x", "y"],
                "data_split": "val_unseen_entity",
            }
            qa.write(json.dumps(row) + "\n")
            kb.write(json.dumps({"data_id": data_id, "entity_id": f"Q{r % entities + 1}"}) + "\n")


def run_one(rows: int, entities: int, trace: bool) -> dict[str, float]:
    """One prep over ``rows`` generated rows, in this process; its figures."""
    from ragym.data_prep.prep import prep_dataset

    root = Path(tempfile.mkdtemp())
    generate(root / "raw", rows, entities)
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    report = prep_dataset("infoseek", ["--raw", str(root / "raw"), "--out", str(root / "out")])
    figures = {
        "rows": rows,
        "rows_out": report["splits"]["val"]["num_rows_out"],
        "seconds": time.perf_counter() - start,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if trace:
        figures["traced_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=200)
    parser.add_argument("--trace", action="store_true", help="also tracemalloc's peak (slower)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child run: print its figures as JSON
    args = parser.parse_args()
    if args.one is not None:
        print("FIGURES " + json.dumps(run_one(args.one, args.entities, args.trace)))
        return
    runs = []
    for rows in (args.rows // 5, args.rows):
        command = [sys.executable, __file__, "--one", str(rows), "--entities", str(args.entities)]
        output = subprocess.run(
            command + (["--trace"] if args.trace else []), capture_output=True, text=True, check=True
        ).stdout
        figures = json.loads(output.rsplit("FIGURES ", 1)[1])
        runs.append(figures)
        print("  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))
    small, large = runs
    extra = large["rows"] - small["rows"]
    growth = {
        k: (large[k] - small[k]) * 2**20 / extra for k in ("max_rss_mib", "traced_peak_mib") if k in large
    }
    print(
        "per extra row: "
        + "  ".join(f"{k.replace('_mib', '')} {v / 1024:.2f} KiB" for k, v in growth.items())
    )


if __name__ == "__main__":
    main()
