"""The warm start's value swap (``ragym.demo.warm_start.swap_values``): the expert's episodes with the names and
answers they copy each replaced by another of the same kind, throughout the episode. Run on a real ``demo_slots``
KB through the agent loop, with the demo's tokenizer (built on the KB, so every name part and region is one token):
the swapped episodes are still episodes in which the expert copies (the searched name is the one the observation
confirmed, the answer the passage's last word), nothing else changed, and no name or region is where it was."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.core.grpo import Sample
from ragym.rl.demo import run
from ragym.rl.demo.tasks import task_overrides
from ragym.rl.engine.config import RecipeReader
from ragym.rl.engine.trainer import read_rows
from ragym.rl.models import load_policy
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.tiny.policy import TinyPolicyConfig, build_tiny_policy, default_corpus
from ragym.rl.tiny.warm_start import ValueSwap, WarmStartConfig, expert_samples

CONFIRMED = re.compile(r"Confirmed: the entity in Image \d+ is ([^.]+)\.")
SEARCHED = re.compile(r'SearchText\(\[" ([^"]+)"\]\)')
ANSWERED = re.compile(r"<answer> ([^<]+)</answer>")
PASSAGE_END = re.compile(r"found in the region of (\w+)\.")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    """A small ``demo_slots`` KB, the answer task's config on it, and a tiny policy whose tokenizer read the KB."""
    out = tmp_path_factory.mktemp("swap")
    kb = build_kb(out / "kb", replace(PRESETS["demo_slots"], num_entities=60, num_rows=40), seed=0)
    config = load_recipe(
        run.DEMO_RECIPE, [*task_overrides("answer"), f"data.train_files={kb}/data/train.parquet"]
    )
    reader = RecipeReader(config)
    corpus = itertools.chain(default_corpus(), run._kb_corpus(kb, reader.get("ragym.demo.kb_corpus_repeats")))
    sizes = TinyPolicyConfig(**reader.get("ragym.demo.policy"))
    policy = build_tiny_policy(reader.get("ragym.demo.arch"), out / "policy", corpus=corpus, config=sizes)
    return config, reader, read_rows(str(kb / "data" / "train.parquet")), policy


def episodes(demo, swap: float) -> tuple[list[Sample], ValueSwap, Any]:
    config, reader, rows, policy = demo
    _, tokenizer, processor = load_policy(policy)
    cfg = WarmStartConfig(**{**reader.get("ragym.demo.warm_start"), "swap_values": swap}, seed=0)
    values = run.copyable_values(tokenizer, rows)
    asyncio.set_event_loop(asyncio.new_event_loop())
    samples = expert_samples(
        rows, lambda server: make_agent_loop(config, server, tokenizer, processor), tokenizer, cfg, 0, values
    )
    return [s[0] for s in samples], values, tokenizer


def test_swapped_episodes_still_copy_and_change_nothing_but_the_values(demo) -> None:
    plain, values, tokenizer = episodes(demo, 0.0)
    swapped, _, _ = episodes(demo, 1.0)
    # The expert's draws are its own: the same episodes, decision for decision, before the swap.
    assert len(plain) == len(swapped) > 0
    value_ids = {t for kind in values.kinds for value in kind for t in value}
    moved = collections.Counter()
    searches = answers = 0
    for before, after in zip(plain, swapped, strict=True):
        assert len(before.prompt_ids) == len(after.prompt_ids)
        assert before.response_mask == after.response_mask and before.images == after.images
        pairs = list(
            zip(before.prompt_ids + before.response_ids, after.prompt_ids + after.response_ids, strict=True)
        )
        # Only value tokens change, each into a value token, one way throughout the episode (a bijection).
        assert all(a == b for a, b in pairs if a not in value_ids) and all(
            b in value_ids for a, b in pairs if a in value_ids
        )
        table = dict(pairs)
        assert len({b for a, b in table.items() if a in value_ids}) == len(
            [a for a in table if a in value_ids]
        )
        moved.update(a != b for a, b in pairs if a in value_ids)
        # The swapped episode is still one in which the expert copies what it read.
        text = tokenizer.decode(after.prompt_ids + after.response_ids)
        for name in SEARCHED.findall(text):
            assert name in CONFIRMED.findall(text), text[-600:]
            searches += 1
        for answer in ANSWERED.findall(text):
            if answer != "unknown":
                assert answer == PASSAGE_END.findall(text)[-1], text[-600:]
                answers += 1
    assert searches > 5 and answers > 5
    # A value stays where it was only when its own draw lands on it (about 1 in the kind's size).
    assert moved[True] > 3 * moved[False]


def test_the_copied_values_are_spread_over_their_kind(demo) -> None:
    """What the swap is for: after it, the region an answer copies is any region, not the training set's mix, so a
    prior over the answers predicts nothing (without it, the answers follow the questions' entities)."""
    swapped, _, tokenizer = episodes(demo, 1.0)
    regions = collections.Counter(
        a for s in swapped for a in ANSWERED.findall(tokenizer.decode(s.response_ids)) if a != "unknown"
    )
    assert len(regions) >= 5 and max(regions.values()) <= 0.4 * sum(regions.values())


def test_values_that_are_not_one_token_are_refused(demo) -> None:
    _, _, _, policy = demo
    _, tokenizer, _ = load_policy(policy)
    with pytest.raises(ValueError, match="one token a value after a space in the policy.s tokenizer"):
        ValueSwap.from_words(tokenizer, [["Zxqvbnmwer", "Amber"]])


def test_swap_values_without_values_is_refused(demo) -> None:
    config, reader, rows, policy = demo
    cfg = WarmStartConfig(**{**reader.get("ragym.demo.warm_start"), "swap_values": 0.5}, seed=0)
    with pytest.raises(ValueError, match="no values to swap"):
        expert_samples(rows, lambda server: None, None, cfg, 0, None)


def test_a_swap_maps_each_kind_onto_itself(tmp_path: Path) -> None:
    swap = ValueSwap((((1, 11), (2, 12), (3, 13)), ((7,), (8,))))
    table = swap.mapping(np.random.default_rng(0))
    assert sorted(table) == [1, 2, 3, 7, 8, 11, 12, 13]
    assert sorted(table[t] for t in (1, 2, 3)) == [1, 2, 3] and sorted(table[t] for t in (7, 8)) == [7, 8]
    assert all(table[t + 10] == table[t] + 10 for t in (1, 2, 3))  # every spelling of a value alike
    sample = Sample([5, 1, 7], [2, 5, 11], [1, 1, 0], [], 0.0, "u")
    out = swap.swap(sample, np.random.default_rng(0))
    assert out.prompt_ids[0] == 5 == out.response_ids[1] and out.response_ids[2] == out.prompt_ids[1] + 10
    assert json.dumps(out.response_mask) == json.dumps(sample.response_mask)


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_share_outside_0_1_is_one_line(share: float) -> None:
    from ragym.rl.errors import UsageError

    fields = dict(num_episodes=1, noise=0.0, reject_noise=0.0, protocol_share=0.0, decision_weight=1.0)
    with pytest.raises(UsageError, match="swap_values must be a share in"):
        WarmStartConfig(**fields, epochs=1, batch_size=1, lr=1e-3, seed=0, swap_values=share)
