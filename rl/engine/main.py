"""``ragym train --recipe R [key=value ...]``: the local GRPO engine on a verl-format recipe."""

from __future__ import annotations

import argparse
import logging

from rl.engine.config import RecipeReader, read_engine_config, recipe_set_keys
from rl.engine.trainer import LocalTrainer
from rl.recipe.compose import load_recipe

logger = logging.getLogger(__name__)


def build_trainer(recipe: str, overrides: list[str]) -> LocalTrainer:
    """Compose ``recipe`` with ``overrides``, log the keys the engine will not use, build the trainer."""
    config = load_recipe(recipe, overrides)
    reader = RecipeReader(config)
    cfg = read_engine_config(reader)
    unused = reader.unused_keys(recipe_set_keys(recipe, overrides))
    if unused:
        logger.warning(
            "recipe keys the local engine does not use (they matter on the cluster only): %s",
            ", ".join(unused),
        )
    return LocalTrainer(config, cfg)


def main(argv: list[str]) -> int:
    """Train until ``trainer.total_training_steps`` (resuming from the last checkpoint when one exists)."""
    parser = argparse.ArgumentParser(prog="ragym train", description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True, help="recipe path or name under recipes/")
    parser.add_argument(
        "--max-steps", type=int, help="stop after this many more steps (default: run to the end)"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.total_training_steps=10")
    args = parser.parse_args(argv)
    trainer = build_trainer(args.recipe, args.overrides)
    try:
        trainer.fit(max_steps=args.max_steps)
    finally:
        trainer.close()
    return 0
