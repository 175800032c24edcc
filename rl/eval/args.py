"""``ragym eval``'s settings and command line, importable without torch, transformers or verl.

``ragym eval --help`` and a usage error are parsed here before the evaluation modules load (5-10 s of
imports), so they take a moment; ``ragym.rl.eval.evaluate.main`` parses with the same function.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ragym.rewards.answers import PAPER_TIME_YEAR_TOLERANCE
from ragym.rl.data.rows import BAD_ROW_POLICIES

BACKENDS = ("auto", "vllm", "hf")
"""``auto`` picks vLLM when it is importable and a GPU is visible, else ``hf``."""


@dataclass(frozen=True)
class EvalConfig:
    """Knobs of one evaluation run."""

    batch_size: int = 16
    """Rows whose episodes run concurrently; the progress bar ticks once per batch."""
    time_year_tolerance: int | None = PAPER_TIME_YEAR_TOLERANCE
    """Time answers within this many years count (InfoSeek protocol as the paper states it, 4.1.1)."""
    bem_model_path: str | None = None
    """E-VQA: local BEM-style answer-equivalence model (paper: BEM >= 0.5); None scores exact match only."""
    no_number_as_zero: bool = True
    """InfoSeek/MMhops Numerical: an answer without a number reads as 0, as the official scorers read it (the
    training reward scores it 0 instead: ``ragym.rewards.infoseek``)."""
    batch_wait_s: float = 0.5
    """HF backend: longest wait for all live episodes to ask before a generation batch starts."""
    seed: int = 0
    """Sampling seed (evaluation is greedy unless the recipe's ``val_kwargs`` sample)."""


def parse_eval_args(argv: list[str]) -> argparse.Namespace:
    """``ragym eval --model DIR --data PARQUET [--data ...] --out DIR [--recipe R] [overrides...]``."""
    parser = argparse.ArgumentParser(
        prog="ragym eval",
        description="the agent loop with a policy, scored like the paper (metrics.json, metrics.md, episodes)",
    )
    parser.add_argument("--model", required=True, type=Path, help="Hugging Face model directory")
    parser.add_argument("--data", required=True, action="append", help="verl parquet rows (repeatable)")
    parser.add_argument("--out", required=True, type=Path, help="report folder")
    parser.add_argument("--recipe", help="recipe for the agent loop (default: the one recorded at export)")
    parser.add_argument("--limit", type=int, default=-1, help="first N rows of each file (-1: all)")
    parser.add_argument("--backend", default="auto", choices=BACKENDS)
    parser.add_argument("--batch-size", type=int, default=EvalConfig.batch_size)
    parser.add_argument("--time-year-tolerance", type=int, default=EvalConfig.time_year_tolerance)
    parser.add_argument("--bem-model-path", help="E-VQA answer-equivalence model (default: exact match only)")
    parser.add_argument(
        "--trace-episodes",
        type=int,
        default=256,
        help="episodes recorded with tokens and images under OUT/traces for ragym view (0: none)",
    )
    parser.add_argument(
        "--bad-rows",
        default="skip",
        choices=BAD_ROW_POLICIES,
        help="rows that cannot start an episode: list and skip them (default), or stop",
    )
    parser.add_argument("overrides", nargs="*", help="recipe overrides, e.g. data.max_response_length=2048")
    args = parser.parse_intermixed_args(argv)
    # A zero batch size failed after the model loaded and a negative one ran no episode; no count of traces is below 0.
    if args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.trace_episodes < 0:
        parser.error(f"--trace-episodes must be >= 0 (0: none), got {args.trace_episodes}")
    return args
