"""The cotrain grid composes to the round and guard settings it relies on, its guard on a split of training rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from ragym.rl.ablate.grids import COTRAIN_GUARD_EVERY, GRIDS
from ragym.rl.ablate.kbvqa import variant_overrides
from ragym.rl.cotrain.config import read_cotrain
from ragym.rl.demo.run import DEMO_RECIPE
from ragym.rl.recipe.compose import load_recipe


def _images(path: str | Path) -> set[str]:
    """The query images of a parquet file's rows."""
    infos = pd.read_parquet(path)["extra_info"]
    return {q for info in infos for q in json.loads(info["env_options"])["query_images"]}


def test_the_cotrain_arm_guards_on_r1_of_its_own_split_of_training_rows(tmp_path: Path) -> None:
    arms = {v.name: v for v in GRIDS["cotrain"].variants}
    configs = {}
    for name, variant in arms.items():
        config = load_recipe(DEMO_RECIPE, variant_overrides(tmp_path, variant, []))
        section = OmegaConf.to_container(OmegaConf.select(config, "ragym.cotrain"), resolve=True)
        configs[name] = (config, read_cotrain(section))  # pyright: ignore[reportArgumentType]
    config, cfg = configs["cotrain"]
    assert cfg is not None and cfg.enable
    assert (cfg.optimiser, cfg.mined_negatives, cfg.guard_k, cfg.max_recall_drop) == ("sgd", 16, 1, 0.0)
    train = pd.read_parquet(config.data.train_files)
    guard = pd.read_parquet(cfg.guard_rows)
    assert len(guard) == len(train) // COTRAIN_GUARD_EVERY
    assert _images(cfg.guard_rows) <= _images(config.data.train_files)
    assert not _images(cfg.guard_rows) & _images(
        config.data.val_files
    )  # the reported set is never the guard's
    frozen = configs["frozen"][1]
    assert frozen is not None and not frozen.enable
    # both arms start from the same weak retriever
    assert (frozen.initial_noise_rank, frozen.initial_noise_strength) == (
        cfg.initial_noise_rank,
        cfg.initial_noise_strength,
    )
