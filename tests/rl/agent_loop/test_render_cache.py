"""The render cache gives exactly the token ids of verl's processor path, cached or not, on both tiny policies."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

import ragym.rl.agent_loop.loop
import ragym.rl.agent_loop.render_cache
from ragym.envs.core import IMAGE_PLACEHOLDER as IMG
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.agent_loop.observations import observation_message
from ragym.rl.agent_loop.render_cache import RenderCache
from ragym.rl.models import load_processor
from ragym.rl.tiny.policy import ARCHS
from tests.rl.fakes import FakeSearchEnv, ScriptedServer, rollout_config

SYSTEM = {"role": "system", "content": "Search, then <answer>text</answer>."}


@pytest.fixture(params=ARCHS)
def processor(request, tiny_policy_dir):
    return load_processor(tiny_policy_dir(request.param))


def _builder(processor):
    """verl's builder for the tiny policy, as the agent loop makes it."""
    return create_continuous_token_builder(
        processor.tokenizer, hf_model_type=processor.config.model_type, processor=processor
    )


def _obs(text: str, sizes: list[tuple[int, int]], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"text": text, "images": tuple(rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes)}


OBSERVATIONS = [
    ("text only", "Invalid action: use one tag.", []),
    ("images at markers", f"[1] {IMG} entity 1\n[2] {IMG} entity 2", [(64, 64), (64, 64)]),
    ("sizes differ, no markers", "two candidates", [(64, 64), (30, 100)]),
    ("image only", "", [(48, 80)]),
    ("whitespace at the edges", "  leading\n\n and trailing  \n", []),
    ("grammar tags and unicode", "<answer>café</answer> ✓ <search>x</search>", [(64, 64)]),
]


def _conversation(processor, text, sizes, seed):
    """Initial messages (system + first observation) and the next observation message, with their images."""
    first, first_images = observation_message(_obs(f"Question: {text}", sizes, seed), turn=-1)
    message, images = observation_message(_obs(text, sizes, seed + 1), turn=0)
    previous = [SYSTEM, first, {"role": "assistant", "content": "<search>bird</search>"}]
    return previous, first_images, message, images


@pytest.mark.parametrize(("name", "text", "sizes"), OBSERVATIONS, ids=[o[0] for o in OBSERVATIONS])
def test_cached_ids_equal_verl_processor_ids(processor, name, text, sizes):
    reference, cached = _builder(processor), _builder(processor)
    cache = RenderCache.install(cached, max_entries=64)
    im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    # Seeds 0 and 10: the second round hits the cache with other pixels of the same sizes.
    for seed in (0, 0, 10):
        previous, first_images, message, _ = _conversation(processor, text, sizes, seed)
        initial = previous[:2]
        assert cached.build_initial_tokens(initial, images=first_images or None) == (
            reference.build_initial_tokens(initial, images=first_images or None)
        )
        for runtime in ([5, 6], [5, im_end]):  # the Qwen builder inserts a newline after <|im_end|>
            got = cached.merge_context_tokens(previous, [*previous, message], runtime)
            want = reference.merge_context_tokens(previous, [*previous, message], runtime)
            assert got == want
    assert cache.num_hits > 0
    assert cache.num_fallbacks == 0


def test_same_text_with_other_image_sizes_is_rendered_again(processor):
    reference, cached = _builder(processor), _builder(processor)
    RenderCache.install(cached, max_entries=64)
    previous = [
        SYSTEM,
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<search>x</search>"},
    ]
    lengths = set()
    for sizes in ([(64, 64)], [(128, 128)], [(64, 64)]):
        message, _ = observation_message(_obs(f"[1] {IMG} entity", sizes), turn=0)
        got = cached.merge_context_tokens(previous, [*previous, message], [5])
        assert got == reference.merge_context_tokens(previous, [*previous, message], [5])
        lengths.add(len(got.token_ids))
    assert len(lengths) == 2  # the sizes expand to different placeholder counts


def test_uncovered_requests_take_verl_path(processor):
    reference, cached = _builder(processor), _builder(processor)
    cache = RenderCache.install(cached, max_entries=64)
    previous, images, _, _ = _conversation(processor, f"{IMG} x", [(64, 64)], seed=0)
    got_out, want_out = {}, {}
    got = cached.build_initial_tokens(previous[:2], images=images, mm_inputs_out=got_out)
    assert got == reference.build_initial_tokens(previous[:2], images=images, mm_inputs_out=want_out)
    assert cache.num_fallbacks == 1
    assert sorted(got_out) == sorted(want_out)  # the processor's pixel outputs, as the caller asked


def test_text_builders_are_left_alone(processor):
    text_builder = create_continuous_token_builder(processor.tokenizer, hf_model_type="qwen2", processor=None)
    assert RenderCache.install(text_builder, max_entries=64) is None


def _rollout(processor, monkeypatch, cached: bool):
    monkeypatch.setattr(
        ragym.rl.agent_loop.loop, "make_env", lambda env_id, **kwargs: FakeSearchEnv(**kwargs)
    )
    if not cached:
        monkeypatch.setattr(
            ragym.rl.agent_loop.render_cache.RenderCache, "install", classmethod(lambda cls, *a, **k: None)
        )
    script = ["<search>red bird</search>", "<search>blue bird</search> more", "<answer>a bird</answer>"]
    server = ScriptedServer(processor.tokenizer, script)
    loop = make_agent_loop(rollout_config(), server, processor.tokenizer, processor)
    assert (loop.render_cache is not None) == cached
    row = {
        "index": 3,
        "env_id": "Fake-v0",
        "env_kwargs": json.dumps({"max_turns": 5}),
        "env_options": json.dumps({"question": "which bird?", "num_images": 2}),
    }
    params = {"temperature": 1.0, "logprobs": True}

    async def episodes():  # two episodes of one group: the second hits the cache on every render
        return [await loop.run(params, extra_info=row, raw_prompt=[]) for _ in range(2)]

    return asyncio.run(episodes())


def test_agent_loop_outputs_are_identical_with_and_without_the_cache(processor, monkeypatch):
    with monkeypatch.context() as patch:
        plain = _rollout(processor, patch, cached=False)
    cached = _rollout(processor, monkeypatch, cached=True)
    for want, got in zip(plain, cached, strict=True):
        assert len(got.extra_fields["turns"]) == 3
        assert got.prompt_ids == want.prompt_ids
        assert got.response_ids == want.response_ids
        assert got.response_mask == want.response_mask
        assert got.response_logprobs == want.response_logprobs
        assert [im.tobytes() for im in got.multi_modal_data["images"]] == [
            im.tobytes() for im in want.multi_modal_data["images"]
        ]
