"""The answer task's warm start (``ragym demo --task answer``) weighs the tokens its expert copies by the task's
``copy_weight``: run for real on a few episodes, with the weights ``imitate`` trains on read back."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from ragym.rl.demo import run
from ragym.rl.tiny import warm_start as warm_start

COPIED = re.compile(r"<(search_call|answer)>(.*?)</\1>", re.DOTALL)
"""An action whose text the expert copies from an observation: a confirmed name searched, a value answered."""


def test_the_answer_task_warm_start_weighs_the_copied_tokens_by_its_copy_weight(
    tiny_policy_dir, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every generated token inside a search call or an answer weighs ``copy_weight`` (5) times what it would
    without the copy spans, and no other token does (a warm start that dropped its spans weighed them 1)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.demo.tasks import task_overrides
    from ragym.rl.engine.config import RecipeReader
    from ragym.rl.models import load_processor
    from ragym.rl.recipe.compose import load_recipe

    kb = build_kb(tmp_path / "kb", replace(PRESETS["demo_slots"], num_entities=60, num_rows=60), seed=0)
    # The fixture's tokenizer was not trained on this KB (a name part is several tokens), so no value swap here;
    # tests/rl/demo/test_value_swap.py swaps with the demo's own tokenizer.
    toy = [
        "ragym.demo.warm_start.num_episodes=6",
        "ragym.demo.warm_start.epochs=1",
        "ragym.demo.warm_start.swap_values=0.0",
    ]
    config = load_recipe(
        run.DEMO_RECIPE, [*task_overrides("answer"), f"data.train_files={kb}/data/train.parquet", *toy]
    )
    weighed = []  # (sample, the weights imitate trains it with, the same without copy spans)

    def spy(sample, decision_after, decision_weight, copy_spans=(), copy_weight=1.0, context_weight=0.0):
        weights = real(sample, decision_after, decision_weight, copy_spans, copy_weight, context_weight)
        weighed.append(
            (sample, weights, real(sample, decision_after, decision_weight, (), 1.0, context_weight))
        )
        return weights

    real = warm_start.token_weights
    monkeypatch.setattr(warm_start, "token_weights", spy)
    policy = tiny_policy_dir("qwen2_5_vl")
    info = run._warm_start(config, RecipeReader(config), policy, tmp_path / "warm_start", seed=0)
    assert info["copy_weight"] == 5.0 and weighed
    tokenizer = load_processor(policy).tokenizer
    copied, expected = [], []
    for sample, weights, plain in weighed:
        ratio = torch.where(plain > 0, weights / plain.clamp(min=1e-9), 1.0)  # [R]
        assert set(ratio.tolist()) <= {1.0, 5.0}
        copied += [t for t, r in zip(sample.response_ids, ratio.tolist(), strict=True) if r == 5.0]
        generated = [t for t, m in zip(sample.response_ids, sample.response_mask, strict=True) if m]
        expected += [text for _, text in COPIED.findall(tokenizer.decode(generated))]
    assert any(text.startswith("SearchText(") for text in expected) and len(expected) > 2  # names and answers
    assert tokenizer.decode(copied) == "".join(expected)
