"""``ragym export``'s command line, importable without torch, transformers or verl.

``ragym``'s dispatcher parses it before ``ragym.rl.export`` loads (verl's model merger, about 5 s), so ``--help``
and a usage error take a moment; ``export.main`` parses with the same function.
"""

from __future__ import annotations

import argparse


def parse_export_args(argv: list[str]) -> argparse.Namespace:
    """``ragym export CHECKPOINT --out DIR [--recipe RECIPE] [--merge]``."""
    parser = argparse.ArgumentParser(
        prog="ragym export", description="a training checkpoint as a Hugging Face model directory"
    )
    parser.add_argument("checkpoint", help="run folder, global_step_N folder, or its actor/ folder")
    parser.add_argument("--out", required=True, help="output model directory (absent or empty)")
    parser.add_argument("--recipe", help="recipe to record on the card when the checkpoint has none")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="a LoRA checkpoint: write the merged model instead of the adapter folder",
    )
    return parser.parse_args(argv)
