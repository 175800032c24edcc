"""The CPU demos' command lines (``ragym demo``, ``ragym r3g-demo``), importable without torch or transformers.

``ragym``'s dispatcher parses them before the demo modules load (5-10 s of imports), so ``--help`` and a usage
error take a moment; each demo's ``main`` parses with the same function.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ragym.rl.demo.tasks import DEFAULT_TASK, DEMO_TASKS

DEMO_RECIPE = "kbvqa_tiny_cpu"
"""The demo's recipe under ``recipes/``."""


def parse_demo_args(argv: list[str]) -> argparse.Namespace:
    """``ragym demo --out DIR [--task T] [--seed S] [--steps N] [--recipe R] [overrides...]``."""
    parser = argparse.ArgumentParser(
        prog="ragym demo",
        description="the CPU demo, end to end: synthetic KB-VQA, a tiny policy, warm start, GRPO, report",
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder (re-running resumes in it)")
    parser.add_argument(
        "--seed", type=int, default=0, help="policy init, expert noise, data order and sampling seed"
    )
    parser.add_argument(
        "--steps", type=int, help="GRPO steps (default: the recipe's trainer.total_training_steps)"
    )
    parser.add_argument(
        "--task",
        default=DEFAULT_TASK,
        choices=list(DEMO_TASKS),
        help="verify (default): learn to confirm the match; answer: also learn to answer from "
        "the confirmed entity's passage (ragym.rl.demo.tasks)",
    )
    parser.add_argument("--recipe", default=DEMO_RECIPE, help="recipe (default: recipes/kbvqa_tiny_cpu.yaml)")
    parser.add_argument("overrides", nargs="*", help="recipe overrides, e.g. ragym.demo.warm_start.epochs=4")
    return parser.parse_args(argv)


def parse_r3g_demo_args(argv: list[str]) -> argparse.Namespace:
    """``ragym r3g-demo --out DIR [--seed S] [--steps N] [overrides...]``."""
    parser = argparse.ArgumentParser(
        prog="ragym r3g-demo",
        description="the R3G CPU demo, end to end: GRPO vs the paper's no-module ablation (evidence Recall@1)",
    )
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int)
    parser.add_argument("overrides", nargs="*")
    return parser.parse_args(argv)
