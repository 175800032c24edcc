"""Peak RSS of KB-VQA episodes over real-size images: flat once the byte-bounded image cache is full.

Builds the tiny synthetic KB, replaces every entity and query image with a ``--width x --height`` photo (skimage
samples, upscaled; no download), then plays scripted episodes (SearchImage, Reject, SearchImage, Answer: two
batches of K = 5 candidates) through ``KBVQA-v0`` with the 7B recipe's budget, and prints, at each checkpoint,
episodes run, peak RSS (MiB), the image cache's bytes and entries, and visual tokens per episode.

Usage: ``python benchmarks/image_memory.py [--episodes 1000] [--cache-mb 64] [--width 2400 --height 1800]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

import pandas as pd

from ragym import envs
from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.envs import image_cache
from ragym.envs.image_budget import visual_tokens
from ragym.envs.kbvqa import kb as kb_module
from ragym.envs.kbvqa.actions import Answer, Reject, SearchImage, format_action

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.photos: the tests' photo maker
from tests.photos import write_photo  # noqa: E402

SCRIPT = [format_action(SearchImage(1)), format_action(Reject()), format_action(Answer("unknown"))]


def photo_kb(root: Path, width: int, height: int) -> tuple[Path, list[dict]]:
    """The tiny KB with every image a photo; its rows' env options."""
    kb_dir = build_kb(root / "kb", PRESETS["tiny"], seed=0)
    kb = kb_module.load_kb(kb_dir)
    paths = [kb_dir / p for p in kb.entities["image"]] + [kb_dir / p for p in kb.queries["image"]]
    for i, path in enumerate(paths):
        write_photo(path, width, height, i)
    frame = pd.concat(pd.read_parquet(kb_dir / "data" / f"{s}.parquet") for s in ("train", "test"))
    return kb_dir, [json.loads(e["env_options"]) for e in frame["extra_info"]]


def peak_rss_mib() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    """Run the episodes and print RSS at each checkpoint."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--checkpoints", default="100,500,1000")
    parser.add_argument(
        "--cache-mb", type=int, default=64, help="image cache budget (ragym.images.cache_bytes)"
    )
    parser.add_argument("--width", type=int, default=2400)
    parser.add_argument("--height", type=int, default=1800)
    args = parser.parse_args()
    image_cache.configure_image_cache(args.cache_mb << 20)
    checkpoints = {int(c) for c in args.checkpoints.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        kb_dir, rows = photo_kb(Path(tmp), args.width, args.height)
        print(
            f"{len(rows)} rows, images {args.width}x{args.height}, cache {args.cache_mb} MiB; "
            f"start rss={peak_rss_mib():.0f} MiB"
        )
        env = envs.make_env("KBVQA-v0", kb_dir=str(kb_dir))
        tokens = []
        for episode in range(1, args.episodes + 1):
            obs, _ = env.reset(options=rows[episode % len(rows)])
            images = list(obs["images"])
            for action in SCRIPT:
                obs, _, terminated, truncated, _ = env.step(action)
                images += obs["images"]
                if terminated or truncated:
                    break
            tokens.append(
                sum(visual_tokens(*im.shape[:2], env.unwrapped.image_budget.image_factor) for im in images)
            )
            if episode in checkpoints:
                cache = image_cache.IMAGE_CACHE
                print(
                    f"episodes={episode} peak_rss={peak_rss_mib():.0f}MiB cache={cache.num_bytes / 2**20:.1f}MiB "
                    f"entries={cache.num_entries} evictions={cache.num_evictions} "
                    f"visual_tokens/episode={sum(tokens) / len(tokens):.0f} (max {max(tokens)})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
