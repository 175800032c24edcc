"""The toy warm start (``ragym.rl.tiny.warm``): what its training step receives, and it trains with ragym's torch threads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch

from ragym.data_prep.toy_data import toy_rows
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import resolve_recipe_path
from ragym.rl.recipe.platforms import merge_overrides, platform_overrides
from ragym.rl.tiny import warm
from ragym.rl.verl_plugin.verl_local import toy_platform


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
    overrides = merge_overrides(platform_overrides("cpu"), toy_platform("MEMORA-v0"))
    config = check_recipe(resolve_recipe_path("memora_qwen2_5_vl_7b"), overrides, validate=False)
    original = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        warm.warm_start(tiny_policy_dir("qwen2_5_vl"), rows[:1], config, tmp_path / "warm", epochs=1)
    finally:
        torch.set_num_threads(original)
    assert seen == [1]
    assert (tmp_path / "warm" / "config.json").is_file()


def test_the_toy_warm_start_imitates_the_experts_turns_each_pass_at_weight_one(
    tmp_path: Path, tiny_policy_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the toy warm start's training step receives (issue #51 item 3): the hooks' schedule of rows and passes,
    every episode the expert's own turns as generated tokens (the env's between them masked out), weight 1."""
    import json

    from ragym.envs.hooks import env_hooks
    from ragym.envs.registry import make_env
    from ragym.envs.scripted import run_episode

    received: list[tuple[list, object]] = []
    monkeypatch.setattr(
        warm, "imitate", lambda model, inputs, epochs, cfg: received.append((epochs, cfg)) or [0.0]
    )
    rows = pd.read_parquet(toy_rows("MEMORA-v0", tmp_path / "toy") / "train.parquet").to_dict("records")
    overrides = merge_overrides(platform_overrides("cpu"), toy_platform("MEMORA-v0"))
    config = check_recipe(resolve_recipe_path("memora_qwen2_5_vl_7b"), overrides, validate=False)
    policy = tiny_policy_dir("qwen2_5_vl")
    warm.warm_start(policy, rows, config, tmp_path / "warm", seed=0)
    ((epochs, cfg),) = received
    num_rows, num_epochs = env_hooks("MEMORA-v0").warm_schedule
    assert len(epochs) == num_epochs and all(e is epochs[0] for e in epochs)
    assert (cfg.lr, cfg.batch_size, cfg.noise, cfg.protocol_share) == (warm.LEARNING_RATE, 4, 0.0, 0.0)
    samples = epochs[0]
    assert len(samples) == min(num_rows, len(rows)) and {w for _, w in samples} == {1.0}
    from ragym.rl.models import load_processor

    tokenizer = load_processor(policy).tokenizer
    for (sample, _), row in zip(samples, rows, strict=False):
        info = dict(row["extra_info"])
        env = make_env(info["env_id"], **json.loads(info["env_kwargs"]))
        turns = run_episode(
            env, warm.expert_for(info["env_id"], env, 0), int(info["index"]), json.loads(info["env_options"])
        )["turns"]
        generated = [t for t, m in zip(sample.response_ids, sample.response_mask, strict=True) if m]
        assert tokenizer.decode(generated).replace("<|im_end|>", "") == "".join(turns)
