"""What the ``ragym budget`` commands share: the composed recipe and the update's settings (``--images``,
``--logprobs``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from omegaconf import DictConfig

from ragym.rl.errors import UsageError

MODEL_KEY = "actor_rollout_ref.model.path"
"""The recipe key naming the policy (a local folder or a hub id)."""


def load_config(recipe: str, overrides: Sequence[str]) -> DictConfig:
    """The composed recipe; a missing recipe is one line."""
    from ragym.rl.recipe.compose import load_recipe

    try:
        return load_recipe(recipe, list(overrides))
    except FileNotFoundError as err:
        raise UsageError(str(err)) from err


def add_update_arguments(parser: argparse.ArgumentParser) -> None:
    """``--images`` and ``--logprobs``, the update's settings ``budget memory`` and ``budget gpu-check`` share."""
    from ragym.rl.budget.memory import LOGPROB_BYTES

    parser.add_argument(
        "--images",
        type=int,
        help="images of the recipe's largest budget per micro-batch "
        "(default: as many as the micro-batch holds)",
    )
    parser.add_argument(
        "--logprobs",
        choices=tuple(LOGPROB_BYTES),
        default="verl",
        help="the update's log-prob path: verl's actor (4 B a logit, default) or transformers' "
        "labels loss (14 B)",
    )
