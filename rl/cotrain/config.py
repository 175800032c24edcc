"""Retriever co-training's recipe section, ``ragym.cotrain``: one frozen dataclass, validated once here.

Both engines read it: the local engine through ``ragym.rl.engine.config``, verl's trainer through ragym's plugin
(``ragym.rl.verl_plugin.trainer``). Off by default; ``initial_encoder`` alone (co-training off) serves a fixed
query-encoder version, which is how the frozen arm of ``ragym ablate cotrain`` starts from the same weak retriever.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ragym.rl.errors import UsageError
from ragym.rl.recipe.counts import switch_problem

SECTION = "ragym.cotrain"
"""The recipe section."""
MODES = ("full", "lora")
"""How the query side trains: every weight of its map, or a low-rank delta (merged into the version written)."""
OPTIMISERS = ("adamw", "sgd")
"""A round's optimiser: AdamW, or plain SGD (its update stays in the span of the harvested queries)."""


@dataclass(frozen=True)
class CotrainConfig:
    """Harvest verified episodes, fine-tune the query-side encoder off the step path, guard and swap it."""

    enable: bool = False
    """Harvest every training episode and train the query encoder every ``every_n_steps`` steps."""
    initial_encoder: str | None = None
    """A query-encoder version folder (``ragym.envs.retrieval.versions``) the retriever serves from the start;
    None: the KB's own query side (identity). Read with co-training off too."""
    initial_noise_rank: int = 0
    """The CPU miniature's deliberately weak retriever (``ragym ablate cotrain``), used when ``initial_encoder`` is
    None: start from W = I + ``initial_noise_strength`` sqrt(d) U V^T, U and V Gaussian / sqrt(d) of this rank (a
    fixed distortion of every query vector, drawn from ``initial_noise_seed``); 0: none."""
    initial_noise_strength: float = 2.0
    """Size of that distortion."""
    initial_noise_seed: int = 0
    """Seed of that distortion (the same for every arm of a comparison)."""
    every_n_steps: int = 5
    """N: a training round starts every N policy steps (when the previous one has finished)."""
    mode: str = "full"
    """``full`` (every weight of the query map) or ``lora`` (a rank-``lora_rank`` delta)."""
    lora_rank: int = 8
    """Rank of the delta under ``mode: lora``."""
    lr: float = 5e-3
    """Learning rate of a round's optimiser (small for AdamW: a round starts from the serving version)."""
    optimiser: str = "adamw"
    """``adamw`` or ``sgd``. AdamW scales every weight's step to about ``lr`` whatever its gradient, so a round on
    tens of pairs moves all dim x dim weights, directions no harvested query spans included; SGD's step is a sum
    of the harvested queries' outer products (the miniature's R@1 fell under AdamW, rose under SGD)."""
    mined_negatives: int = 0
    """M > 0: each pair's hard negatives are every harvested negative of its image plus the serving version's top
    M entities for it (its gold excluded: the look-alikes that sit above or beside the gold), and the loss is the
    in-batch loss over the batch's distinct candidates (so no pair's gold is another's negative twice); 0: one
    harvested negative per pair (or a random entity), the contrastive trainer's MNRL as is."""
    round_steps: int = 60
    """Optimiser steps per round."""
    batch_size: int = 16
    """Pairs per step; the other pairs of the batch are in-batch negatives (the contrastive trainer's loss)."""
    scale: float = 20.0
    """Inverse temperature of the loss (``ragym.rl.retriever.config.LossConfig.scale``)."""
    original_data: str | None = None
    """JSONL of the encoder's original training pairs (``query``, ``positive``, ``negatives``), mixed into every
    round; None: the harvest alone."""
    original_share: float = 0.5
    """Share of each round's pairs drawn from ``original_data`` (when given)."""
    max_recall_drop: float = 0.02
    """Forgetting guard: a new version whose held-out R@``guard_k`` is lower than the serving one's by more than
    this is not swapped in (logged, counted as ``cotrain/swaps_skipped``)."""
    guard_k: int = 1
    """Cut-off of the guard's recall."""
    guard_rows: str | None = None
    """Parquet rows whose (query image, gold entity) pairs are the guard's held-out retrieval set; None: the
    recipe's ``data.val_files`` (then the guard selects versions on the set ``retriever/recall@k`` reports:
    name a validation split of training-side rows to keep the report's set unseen). Their query images never
    enter the harvest buffer, nor do ``data.val_files``'."""
    update_documents: bool = False
    """Train the document side too: each round also moves the stored vectors of the entities its labels touch (the
    harvested positives and hard negatives, mined ones included) by a learned delta, renormalised, jointly with the
    query map; a version carries those rows and serving it re-writes only them in the index (an exact flat index:
    another kind is refused at start). False: the query side alone, the index as the KB built it."""
    document_lr: float = 1e-2
    """Learning rate of the document-side deltas (``update_documents``), in the round's optimiser beside ``lr``:
    it bounds how far a round moves an entity's vector (AdamW: about this much per weight and step)."""
    background: bool = True
    """Train each round in its own process (a Ray task under verl on Ray), so the policy's step is not held; false
    runs it inline (tests)."""
    seed: int = 0
    """Seed of a round's batch order."""

    def __post_init__(self) -> None:
        for name in ("enable", "update_documents", "background"):
            # a word on the command line (+ragym.cotrain.enable=no) stays the string "no", a true value
            problem = switch_problem(f"{SECTION}.{name}", getattr(self, name))
            if problem is not None:
                raise UsageError(problem)
        numbers = (
            "initial_noise_strength",
            "lr",
            "scale",
            "original_share",
            "max_recall_drop",
            "document_lr",
        )
        for name in numbers:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise UsageError(f"{SECTION}.{name} must be a number, got {value!r}")
        if self.optimiser not in OPTIMISERS:
            raise UsageError(f"{SECTION}.optimiser must be one of {OPTIMISERS}, got {self.optimiser!r}")
        least = {"initial_noise_rank": 0, "mined_negatives": 0}
        least.update(dict.fromkeys(("every_n_steps", "lora_rank", "round_steps", "batch_size", "guard_k"), 1))
        for name, low in least.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"{SECTION}.{name} must be an integer >= {low}, got {value!r}")
        if self.mode not in MODES:
            raise UsageError(f"{SECTION}.mode must be one of {MODES}, got {self.mode!r}")
        if not 0.0 <= self.original_share < 1.0:
            raise UsageError(f"{SECTION}.original_share must be in [0, 1), got {self.original_share!r}")
        if not (self.lr > 0 and self.max_recall_drop >= 0 and self.scale > 0):
            raise UsageError(f"{SECTION}: lr and scale must be > 0 and max_recall_drop >= 0")
        if not self.document_lr > 0:
            raise UsageError(f"{SECTION}.document_lr must be > 0, got {self.document_lr!r}")


def read_cotrain(values: dict[str, Any] | None) -> CotrainConfig | None:
    """The section as a config (None when the recipe has none); an unknown key is an error naming it."""
    if values is None:
        return None
    known = {f.name for f in fields(CotrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"{SECTION}: unknown key(s) {unknown}; expected some of {sorted(known)}")
    return CotrainConfig(**values)
