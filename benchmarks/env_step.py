"""KB-VQA env speed and synthetic retrieval difficulty.

Prints, for a 100k-entity synthetic KB with live flat faiss search:
- env steps/s of the scripted signature policy (whole episodes, every action kind);
- the median time of a SearchImage step and of the bare faiss search it wraps (same query, same k);
and R@1 / R@15 of the pixel retriever for every difficulty preset. The last line is
``ratio=<SearchImage step time / bare faiss search time>`` with candidate images read cold from the KB's
image pack (goal <= 1.2); the same step decoding image files cold, and warm, is printed above it.

Usage: ``python benchmarks/env_step.py [--num-entities 100000] [--episodes 200] [--probes 300] [--faiss-threads 1]``.
KBs are cached under ``$RAGYM_CACHE`` (default ``~/.cache/ragym``); the 100k KB takes a minute to build once
(and its image pack a few seconds).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ragym import envs
from ragym.data_prep.synthetic_kb import PRESETS, build_kb, cache_root, cached_kb
from ragym.envs.image_pack import ImagePack, write_image_pack
from ragym.envs.kbvqa.actions import SearchImage, format_action
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.kbvqa.policies import SignaturePolicy
from ragym.envs.retrieval.search_settings import set_search_threads
from ragym.envs.scripted import run_episode


def row_options(kb_dir: Path) -> list[dict]:
    """Env options of every row (train and test)."""
    frames = [pd.read_parquet(kb_dir / "data" / f"{split}.parquet") for split in ("train", "test")]
    return [json.loads(e["env_options"]) for frame in frames for e in frame["extra_info"]]


def recall(kb_dir: Path, ks: tuple[int, ...] = (1, 15)) -> dict[int, float]:
    """R@k of the stored candidate lists (the KB's image retriever) over every query image."""
    kb = load_kb(kb_dir)
    hits = {k: [] for k in ks}
    for options in row_options(kb_dir):
        for path, gold in zip(options["query_images"], options["gold_entities"], strict=True):
            ranking = list(kb.queries["candidates"].iloc[kb.query_index(path)])
            for k in ks:
                hits[k].append(gold in ranking[:k])
    return {k: 100.0 * float(np.mean(v)) for k, v in hits.items()}


def big_kb(num_entities: int) -> Path:
    """The benchmark KB (medium difficulty), built once."""
    out = cache_root() / "bench" / f"medium-{num_entities}"
    if not (out / "kb.json").exists():
        print(f"building a {num_entities}-entity KB in {out} (once)...", flush=True)
        start = time.perf_counter()
        build_kb(out, replace(PRESETS["medium"], num_entities=num_entities, num_rows=1000), seed=0)
        print(f"  built in {time.perf_counter() - start:.0f}s", flush=True)
    return out


def steps_per_second(env, options: list[dict], episodes: int) -> tuple[float, int]:
    """Scripted-policy throughput over whole episodes."""
    policy, steps = SignaturePolicy(env), 0
    start = time.perf_counter()
    for i in range(episodes):
        steps += len(run_episode(env, policy, i, options[i % len(options)])["turns"])
    return steps / (time.perf_counter() - start), steps


def search_step_vs_faiss(env, options: list[dict]) -> tuple[float, float]:
    """Median SearchImage step time and median bare faiss time (same query, same k), in alternating order."""
    turn, k = format_action(SearchImage(1)), env.config.candidates_per_batch
    retriever = env.kb.image_retriever()
    step_times, faiss_times = [], []
    for i, options_i in enumerate(options):
        env.reset(options=options_i)
        query = np.ascontiguousarray(env.state.image_query(1)[None], dtype=np.float32)  # (1, d)
        for which in (0, 1) if i % 2 else (1, 0):  # alternate so neither side always runs first
            start = time.perf_counter()
            retriever.raw_search(query, k) if which == 0 else env.step(turn)
            (faiss_times if which == 0 else step_times).append(time.perf_counter() - start)
    return float(np.median(step_times)), float(np.median(faiss_times))


def main() -> None:
    """Run every measurement and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-entities", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument(
        "--faiss-threads",
        type=int,
        help="faiss OpenMP threads per search (default: ragym's in-process choice, 1)",
    )
    args = parser.parse_args()
    for name in ("easy", "medium", "hard", "demo"):
        kb_dir = cached_kb(name)
        r = recall(kb_dir)
        size = load_kb(kb_dir).manifest["num_entities"]
        print(f"preset={name:<7} entities={size:<6} R@1={r[1]:.1f}% R@15={r[15]:.1f}%", flush=True)
    if args.faiss_threads:  # both sides search through FaissRetriever, which sets each search's threads
        set_search_threads(args.faiss_threads)
    kb_dir = big_kb(args.num_entities)
    options = row_options(kb_dir)
    for source in ("precomputed", "live"):
        env = envs.make_env(
            "KBVQA-Demo-v0", kb_dir=str(kb_dir), candidate_source=source, show_visual_signature=True
        )
        env.kb.image_retriever()  # build the index outside the timings
        rate, steps = steps_per_second(env, options, args.episodes)
        print(
            f"entities={args.num_entities} candidates={source} scripted_steps={steps} env_steps_per_s={rate:.0f}"
        )
    # Probes use rows the episodes above did not touch, so their candidate images were never served by this
    # process (as in training). Image files: opened and decoded on first use, then cached (the warm pass).
    # Image pack (ragym.envs.image_pack): a slice of a memory-mapped file of decoded pixels, no cache needed.
    pack = env.kb.image_pack
    if pack is None:
        write_image_pack(kb_dir)
        pack = ImagePack.load(kb_dir)
    files_probes = options[args.episodes : args.episodes + args.probes]
    pack_probes = options[args.episodes + args.probes : args.episodes + 2 * args.probes]
    env.kb.image_pack = None
    files_step, files_bare = search_step_vs_faiss(env, files_probes)
    warm_step, warm_bare = search_step_vs_faiss(env, files_probes)
    env.kb.image_pack = pack
    step, bare = search_step_vs_faiss(env, pack_probes)
    print(f"warm images: search_image_step_ms={warm_step * 1e3:.3f} bare_faiss_ms={warm_bare * 1e3:.3f}")
    # The step's cost above the search it wraps, in ms: a loaded machine slows faiss far more than the
    # image reads, which dilutes the ratio; the overhead says what serving the images costs.
    print(
        f"cold images, files: search_image_step_ms={files_step * 1e3:.3f} bare_faiss_ms={files_bare * 1e3:.3f} "
        f"overhead_ms={(files_step - files_bare) * 1e3:.2f} ratio={files_step / files_bare:.3f}"
    )
    print(
        f"cold images, pack: search_image_step_ms={step * 1e3:.3f} bare_faiss_ms={bare * 1e3:.3f} "
        f"overhead_ms={(step - bare) * 1e3:.2f}"
    )
    print(f"ratio={step / bare:.3f}")


if __name__ == "__main__":
    main()
