"""The in-process generation server: logprobs, batching with shared prefill, stop rules, sampling."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from ragym.rl.core.hf_server import HFServer, Sampling, sample_tokens
from ragym.rl.core.vision import ImageInputs
from tests.rl.engine_helpers import build_model, image_processor, reference_logprobs, tokenizer

ARCHS = ("qwen2_5_vl", "qwen3_vl")


def _prompt(model, num_placeholders: int, text: str) -> list[int]:
    tok = tokenizer()
    image = [model.config.image_token_id] * num_placeholders
    vision = tok.encode("<|vision_start|>") + image + tok.encode("<|vision_end|>") if num_placeholders else []
    return (
        tok.encode("<|im_start|>user\n") + vision + tok.encode(f"{text}<|im_end|>\n<|im_start|>assistant\n")
    )


def _server(model, arch: str, seed: int = 0) -> HFServer:
    return HFServer(
        model,
        tokenizer(),
        ImageInputs(image_processor(arch)),
        default_max_tokens=8,
        batch_wait_s=2.0,
        seed=seed,
    )


def _run(server: HFServer, requests: list[dict]) -> list:
    async def go():
        server.track_episodes(len(requests))

        async def one(i, request):
            try:
                return await server.generate(f"r{i}", **request)
            finally:
                server.episode_done()

        return await asyncio.gather(*[one(i, r) for i, r in enumerate(requests)])

    return asyncio.run(go())


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (56, 56, 3), dtype=np.uint8)


@pytest.mark.parametrize("arch", ARCHS)
def test_logprobs_match_a_full_forward_for_padded_and_shared_rows(arch):
    model = build_model(arch)
    server = _server(model, arch)
    placeholders = int(ImageInputs(image_processor(arch)).encode([_image(0)])["image_grid_thw"].prod()) // 4
    long, short = _prompt(model, placeholders, "a longer question here"), _prompt(model, placeholders, "hi")
    params = {"temperature": 1.0, "max_tokens": 6}
    requests = [
        {"prompt_ids": long, "sampling_params": params, "image_data": [_image(0)]},
        {"prompt_ids": long, "sampling_params": params, "image_data": [_image(0)]},
        {"prompt_ids": short, "sampling_params": params, "image_data": [_image(1)]},
    ]
    outputs = _run(server, requests)
    assert server.stats.num_prefill_rows == 2  # the two identical prompts were prefilled once
    for request, output in zip(requests, outputs, strict=True):
        vision = ImageInputs(image_processor(arch)).encode(request["image_data"])
        expected = reference_logprobs(model, request["prompt_ids"], output.token_ids, vision)
        assert torch.allclose(expected, torch.tensor(output.log_probs), atol=1e-4)


def test_same_seed_same_outputs_and_budget_respected():
    model = build_model()
    prompt = _prompt(model, 0, "question")
    requests = [{"prompt_ids": prompt, "sampling_params": {"temperature": 1.0, "max_tokens": 5}}] * 3
    first, second = (
        _run(_server(model, "qwen2_5_vl", 7), requests),
        _run(_server(model, "qwen2_5_vl", 7), requests),
    )
    assert [o.token_ids for o in first] == [o.token_ids for o in second]
    assert all(len(o.token_ids) <= 5 for o in first)


def test_identical_prompts_get_the_same_samples_per_request_id_whatever_the_arrival_order():
    model = build_model()
    prompts = [_prompt(model, 0, "question"), _prompt(model, 0, "another")]
    ids = ["r0", "r1", "r2", "r3", "r4", "r5"]
    # Two token budgets: two sub-batches, whose order must not follow the arrival order either.
    requests = {
        rid: {"prompt_ids": prompts[i % 2], "sampling_params": {"temperature": 1.0, "max_tokens": 4 + i // 4}}
        for i, rid in enumerate(ids)
    }

    def by_id(order: list[str]) -> dict[str, list[int]]:
        server = _server(model, "qwen2_5_vl", 7)

        async def go():
            server.track_episodes(len(order))

            async def one(rid):
                try:
                    return rid, await server.generate(rid, **requests[rid])
                finally:
                    server.episode_done()

            return await asyncio.gather(*[one(rid) for rid in order])

        return {rid: list(out.token_ids) for rid, out in asyncio.run(go())}

    forward = by_id(ids)
    assert by_id(list(reversed(ids))) == forward
    assert forward["r0"] != forward["r2"] or forward["r1"] != forward["r3"]  # same prompt, own samples


def test_a_request_with_a_seed_draws_the_same_tokens_alone_or_in_a_batch():
    model = build_model()
    short, long = _prompt(model, 0, "question"), _prompt(model, 0, "a much longer question")
    seeded = {"prompt_ids": short, "sampling_params": {"temperature": 1.0, "max_tokens": 6, "seed": 11}}
    unseeded = [
        {"prompt_ids": p, "sampling_params": {"temperature": 1.0, "max_tokens": 6}} for p in (short, long)
    ]
    alone = _run(_server(model, "qwen2_5_vl", seed=7), [seeded])[0].token_ids
    # Another server seed, padded beside a longer prompt, after rows that draw from the server's generator.
    other_seed = {**seeded, "sampling_params": {**seeded["sampling_params"], "seed": 12}}
    batched = _run(_server(model, "qwen2_5_vl", seed=8), [*unseeded, seeded, other_seed])
    assert batched[2].token_ids == alone
    assert batched[3].token_ids != alone


def test_stop_string_ends_the_turn_at_the_token_that_completes_it():
    model, tok = build_model(), tokenizer()
    prompt = _prompt(model, 0, "question")
    greedy = {"temperature": 0.0, "max_tokens": 8}
    full = _run(_server(model, "qwen2_5_vl"), [{"prompt_ids": prompt, "sampling_params": greedy}])[
        0
    ].token_ids
    assert len(full) >= 3, "the greedy continuation is too short to place a stop string"
    stop = tok.decode(full[:3])[-2:]
    expected = next(i for i in range(1, len(full) + 1) if stop in tok.decode(full[:i]))
    params = {**greedy, "stop": [stop], "include_stop_str_in_output": True}
    stopped = _run(_server(model, "qwen2_5_vl"), [{"prompt_ids": prompt, "sampling_params": params}])[0]
    assert stopped.token_ids == full[:expected]


def test_eos_ends_generation():
    model, tok = build_model(), tokenizer()
    prompt = _prompt(model, 0, "question")
    first = _run(
        _server(model, "qwen2_5_vl"), [{"prompt_ids": prompt, "sampling_params": {"temperature": 0.0}}]
    )[0]
    params = {"temperature": 0.0, "stop_token_ids": [first.token_ids[0]]}
    out = _run(_server(model, "qwen2_5_vl"), [{"prompt_ids": prompt, "sampling_params": params}])[0]
    assert out.token_ids == first.token_ids[:1]
    assert tok.eos_token_id in _server(model, "qwen2_5_vl").eos_ids


@pytest.mark.parametrize(
    ("params", "allowed"),
    [
        ({"temperature": 1.0, "top_k": 1}, {0}),
        ({"temperature": 1.0, "top_k": 2}, {0, 1}),
        ({"temperature": 1.0, "top_p": 0.5}, {0}),  # token 0 alone holds > 0.5 of the mass
        ({"temperature": 0.0}, {0}),
    ],
)
def test_sampling_filters(params, allowed):
    logits = torch.tensor([[3.0, 2.0, 0.0, -1.0]]).repeat(200, 1)
    sampling = Sampling.from_params(params, default_max_tokens=4)
    tokens, logprobs = sample_tokens(logits, sampling, torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) <= allowed
    scale = params["temperature"] or 1.0
    assert torch.allclose(
        logprobs, torch.log_softmax(logits / scale, -1).gather(-1, tokens[:, None]).squeeze(-1)
    )


def test_unsupported_sampling_is_an_error():
    with pytest.raises(ValueError, match="repetition_penalty"):
        Sampling.from_params({"repetition_penalty": 1.2}, default_max_tokens=4)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_policy_never_samples_a_vision_placeholder(arch):
    """verl #7038: a sampled image / video placeholder has no image behind it and breaks every later forward.
    The logits are forced toward both placeholders; sampling must still pick something else."""
    model = build_model(arch)
    placeholders = [model.config.image_token_id, model.config.video_token_id]

    def favour_placeholders(module, args, output):
        output.logits[..., placeholders] += 1e4
        return output

    model.register_forward_hook(favour_placeholders)
    server = _server(model, arch)
    params = {"temperature": 1.0, "max_tokens": 8}
    requests = [
        {"prompt_ids": _prompt(model, 0, f"question {i}"), "sampling_params": params} for i in range(4)
    ]
    outputs = _run(server, requests)
    sampled = {token for output in outputs for token in output.token_ids}
    assert len(sampled) > 0
    assert sampled.isdisjoint(placeholders)
    assert all(np.isfinite(output.log_probs).all() for output in outputs)
