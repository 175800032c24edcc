"""The toy warm start (``ragym.rl.tiny.warm``) trains with ragym's torch threads, not torch's default."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch

from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import resolve_recipe_path
from ragym.rl.recipe.platforms import merge_overrides, platform_overrides
from ragym.rl.tiny import warm
from ragym.rl.tiny.toy_data import toy_rows


def test_the_warm_start_imitates_with_one_torch_thread(
    tmp_path: Path, tiny_policy_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With torch's default (a spinning thread per core) the toy warm start ran many times slower beside other
    work (``benchmarks/training_threads.py``); it sets one thread itself, whatever the process had."""
    seen: list[int] = []

    def imitate(*args: object, **kwargs: object) -> list[float]:
        seen.append(torch.get_num_threads())
        return [0.0]

    monkeypatch.setattr(warm, "imitate", imitate)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    rows = pd.read_parquet(toy_rows("MEMORA-v0", tmp_path / "toy") / "train.parquet").to_dict("records")
    overrides = merge_overrides(platform_overrides("cpu"), platform_overrides("toy"))
    config = check_recipe(resolve_recipe_path("memora_qwen2_5_vl_7b"), overrides, validate=False)
    original = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        warm.warm_start(tiny_policy_dir("qwen2_5_vl"), rows[:1], config, tmp_path / "warm", epochs=1)
    finally:
        torch.set_num_threads(original)
    assert seen == [1]
    assert (tmp_path / "warm" / "config.json").is_file()
