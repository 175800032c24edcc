"""Toy training rows for every environment, from its built-in synthetic data, in verl's row schema.

``ragym train --engine verl --toy DIR`` trains any shipped recipe on these (with a tiny policy), so the whole
cluster path (verl's trainer, the agent loop, the env, the reward recipe) runs on a laptop in minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ragym.data_prep.rows import verl_row
from ragym.envs.hooks import env_hooks, env_named, envs_with, hook


def toy_env(recipe: Path) -> str:
    """The environment ``recipe`` trains, by its name: the env whose hooks' ``name`` is the name's first word
    (``kbvqa_qwen2_5_vl_7b`` -> ``KBVQA-v0``); an error names the recipes toy data exists for."""
    env_id = env_named(recipe.stem.split("_")[0])
    if env_id is None or env_hooks(env_id).toy_rows is None:
        names = sorted({env_hooks(e).name for e in envs_with("toy_rows")})
        raise ValueError(
            f"{recipe.name}: toy data exists for recipes named {', '.join(f'{n}_*' for n in names)}"
        )
    return env_id


COLUMNS = ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]


def toy_rows(env_id: str, out: Path) -> Path:
    """Write ``out/data/{train,test}.parquet`` for ``env_id`` (its ``EnvHooks.toy_rows``; once, reused after) and
    return ``out/data``."""
    data = out / "data"
    if (data / "test.parquet").is_file():
        return data
    hook(env_id, "toy_rows", "toy data")(out)
    if not (data / "train.parquet").is_file() or not (data / "test.parquet").is_file():
        raise RuntimeError(f"{env_id}'s toy_rows hook wrote no {data}/train.parquet and test.parquet")
    return data


def toy_row(
    env_id: str,
    index: int,
    split: str,
    source: str,
    truth: Any,
    options: dict | None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One verl row that resets ``env_id`` with ``options`` (None: the env's own synthetic draw for the seed);
    ``truth`` is the row's ground truth in the env's own form, as its reward terms read it (a dict for DocMemo
    and MEMORA, a list of answers elsewhere)."""
    return verl_row(
        data_source=source,
        ability=env_id.split("-")[0].lower(),
        question="(the env writes the prompt)",
        ground_truth=truth,
        index=index,
        split=split,
        env_id=env_id,
        env_kwargs=env_kwargs or {},
        env_options=options,
    )


def write_splits(data: Path, splits: dict[str, list[dict[str, Any]]]) -> None:
    """``data/{split}.parquet`` for each split's rows."""
    data.mkdir(parents=True, exist_ok=True)
    for split, records in splits.items():
        pd.DataFrame.from_records(records, columns=COLUMNS).to_parquet(data / f"{split}.parquet")
