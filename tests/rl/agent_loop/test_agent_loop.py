"""The ragym agent loop on CPU with a scripted server: masks, images, budgets, determinism, bad rows."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

import ragym.rl.agent_loop.loop
from ragym.envs.metrics import shared_metrics
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.models import load_processor
from ragym.rl.tiny.policy import ARCHS
from tests.rl.fakes import FakeSearchEnv, ScriptedServer, rollout_config

SEARCH = "<reason>look</reason><search>red bird</search> text after the stop string"
ANSWER = "<reason>done</reason><answer>a bird</answer>"
MERGE = 2
KINDS = ("search_image", "answer", "invalid")


@pytest.fixture(autouse=True)
def fake_env(monkeypatch):
    """Rows name ``Fake-v0``; the loop builds ``FakeSearchEnv`` with the row's kwargs."""
    monkeypatch.setattr(
        ragym.rl.agent_loop.loop, "make_env", lambda env_id, **kwargs: FakeSearchEnv(**kwargs)
    )


@pytest.fixture(params=ARCHS)
def processor(request, tiny_policy_dir):
    return load_processor(tiny_policy_dir(request.param))


def _row(index=0, options=None, env_kwargs=None):
    options = {"question": "which bird?", "num_images": 2} if options is None else options
    return {
        "index": index,
        "env_id": "Fake-v0",
        "env_kwargs": json.dumps(env_kwargs or {}),
        "env_options": json.dumps(options),
    }


def _run(processor, script, config=None, row=None, logprobs=True):
    server = ScriptedServer(processor.tokenizer, script)
    loop = make_agent_loop(config or rollout_config(), server, processor.tokenizer, processor)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": logprobs}
    output = asyncio.run(loop.run(params, extra_info=row or _row(), raw_prompt=[]))
    return output, server


def _mask_one_runs(ids, mask):
    runs, current = [], []
    for token, m in zip(ids, mask, strict=True):
        if m:
            current.append(token)
        elif current:
            runs, current = [*runs, current], []
    return runs + ([current] if current else [])


def _num_pads(processor, ids):
    return sum(1 for t in ids if t == processor.image_token_id)


def _implied_pads(processor, images):
    if not images:
        return 0
    grid = processor.image_processor(images=images, return_tensors="pt")["image_grid_thw"]
    return int(grid.prod(dim=1).sum()) // MERGE**2


def test_mask_is_one_exactly_on_generated_tokens(processor):
    out, server = _run(processor, [SEARCH, "garbage", SEARCH, ANSWER])
    generated = [call["output"].token_ids for call in server.calls]
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    assert _mask_one_runs(out.response_ids, out.response_mask) == generated
    server_logprobs = [lp for call in server.calls for lp in call["output"].log_probs]
    assert [
        lp for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m
    ] == server_logprobs
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if not m)
    # Each turn's generated ids are exactly the prompt of the next call's suffix start: never re-tokenized.
    for call, following in zip(server.calls, server.calls[1:], strict=False):
        start = len(call["prompt_ids"])
        assert (
            following["prompt_ids"][start : start + len(call["output"].token_ids)] == call["output"].token_ids
        )
    assert out.extra_fields["turns"][0] == "<reason>look</reason><search>red bird</search>"


def test_image_placeholders_match_images_and_never_mask_one(processor):
    out, server = _run(processor, [SEARCH, SEARCH, ANSWER])
    images = out.multi_modal_data["images"]
    assert len(images) == 2 + 2 + 2  # two query images, two candidates per search
    vision_ids = {
        processor.tokenizer.convert_tokens_to_ids(t) for t in ragym.rl.agent_loop.loop.VISION_TOKENS
    }
    assert not any(t in vision_ids for t, m in zip(out.response_ids, out.response_mask, strict=True) if m)
    assert _num_pads(processor, out.prompt_ids + out.response_ids) == _implied_pads(processor, images)
    for call in server.calls:  # every call carries all images so far, matching its placeholders
        assert call["images"] == images[: len(call["images"])]
        assert _num_pads(processor, call["prompt_ids"]) == _implied_pads(processor, call["images"])
    assert [len(c["images"]) for c in server.calls] == [2, 4, 6]


def test_stop_strings_and_length_budget_reach_the_server(processor):
    out, server = _run(processor, [SEARCH, ANSWER], config=rollout_config(response_length=300))
    for call in server.calls:
        assert call["params"]["stop"] == list(FakeSearchEnv.stop_strings)
        assert call["params"]["include_stop_str_in_output"] is True
    first, second = server.calls
    assert first["params"]["max_tokens"] == 300
    assert second["params"]["max_tokens"] == 300 - (len(second["prompt_ids"]) - len(first["prompt_ids"]))
    assert out.extra_fields["truncated"] is False


def test_identical_seeds_give_identical_trajectories(processor):
    a, _ = _run(processor, [SEARCH, "oops", ANSWER], row=_row(index=5))
    b, _ = _run(processor, [SEARCH, "oops", ANSWER], row=_row(index=5))
    c, _ = _run(processor, [SEARCH, "oops", ANSWER], row=_row(index=6))
    for field in ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "extra_fields"):
        assert getattr(a, field) == getattr(b, field), field
    pixels = lambda out: [np.asarray(img) for img in out.multi_modal_data["images"]]  # noqa: E731
    assert all(np.array_equal(x, y) for x, y in zip(pixels(a), pixels(b), strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(pixels(a), pixels(c), strict=True))


@pytest.mark.parametrize(
    ("max_assistant_turns", "env_max_turns", "num_turns", "reason"),
    [(2, 8, 2, "max_turns"), (None, 3, 3, "max_turns"), (None, 8, 4, None)],
)
def test_turn_budgets(tiny_policy_dir, max_assistant_turns, env_max_turns, num_turns, reason):
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    config = rollout_config(response_length=4096, max_assistant_turns=max_assistant_turns)
    row = _row(env_kwargs={"max_turns": env_max_turns})
    out, server = _run(processor, [SEARCH, SEARCH, SEARCH, ANSWER], config=config, row=row)
    assert len(out.extra_fields["turns"]) == len(server.calls) == num_turns
    # verl's count (tool_agent_loop.py): the prompt, every turn, and an observation after every turn but the last.
    assert out.num_turns == 1 + num_turns + (num_turns - 1)
    truncations = [e for e in out.extra_fields["events"] if e["type"] == "truncated"]
    assert out.extra_fields["truncated"] is (reason is not None)
    assert [e["reason"] for e in truncations] == ([reason] if reason else [])
    assert _num_pads(processor, out.prompt_ids + out.response_ids) == _implied_pads(
        processor, out.multi_modal_data["images"]
    )


@pytest.mark.parametrize("response_length", [20, 60, 120])
def test_length_budget_truncates(tiny_policy_dir, response_length):
    processor = load_processor(tiny_policy_dir("qwen3_vl"))
    out, _ = _run(processor, [SEARCH] * 10, config=rollout_config(response_length=response_length))
    assert len(out.response_ids) == len(out.response_mask) <= response_length
    assert out.extra_fields["truncated"] is True
    assert out.extra_fields["events"][-1]["type"] == "truncated"
    assert out.extra_fields["events"][-1]["reason"] == "max_response_length"
    assert _num_pads(processor, out.prompt_ids + out.response_ids) == _implied_pads(
        processor, out.multi_modal_data["images"]
    )


@pytest.mark.parametrize("response_length", [5, 8, 20, 60, 400])
def test_a_truncation_names_its_cause(tiny_policy_dir, response_length):
    """The policy's own tokens filling the length vs an observation (its images: the budget's share) not fitting."""
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    row = _row(env_kwargs={"max_turns": 40})
    out, server = _run(
        processor, [SEARCH] * 40, config=rollout_config(response_length=response_length), row=row
    )
    cut = out.extra_fields["events"][-1]
    assert cut["type"] == "truncated" and cut["reason"] == "max_response_length"
    metrics = shared_metrics(out.extra_fields["events"], KINDS)
    generated = len(server.calls[-1]["output"].token_ids)
    # The scripted search turn is 11 tokens: up to 8 the policy's own turn fills the length.
    assert ("observation_tokens" in cut) is (response_length > 11)
    if "observation_tokens" in cut:
        # The last observation did not fit: what is kept plus it leaves no room; its images are counted.
        assert len(out.response_mask) + cut["observation_tokens"] >= response_length
        image_tokens = _implied_pads(processor, [np.zeros((28, 28, 3), np.uint8)])
        assert cut["visual_tokens"] >= image_tokens > 0
        assert (metrics["truncated_by_observation"], metrics["truncated_by_images"]) == (1.0, 1.0)
        assert metrics["truncated_by_policy"] == 0.0
    else:
        # The policy's last turn filled the length itself.
        assert len(out.response_mask) >= response_length and generated > 0
        assert (metrics["truncated_by_policy"], metrics["truncated_by_observation"]) == (1.0, 0.0)
    assert metrics["truncated"] == 1.0


@pytest.mark.parametrize("env_max_turns", [1, 4])
def test_a_turn_the_length_budget_cut_never_reaches_the_env(tiny_policy_dir, env_max_turns):
    """docs/rewards.md: a reply the length budget cut is recorded as ``truncated`` without stepping the env. The env
    took it: a format error and an invalid action for the policy's cut, and at the env's last turn its own
    ``max_turns`` in place of the cause (``truncated_by_policy`` 0)."""
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    num_tokens = len(processor.tokenizer.encode(ANSWER, add_special_tokens=False))
    row = _row(env_kwargs={"max_turns": env_max_turns})
    config = rollout_config(response_length=num_tokens - 2)
    out, server = _run(processor, [ANSWER], config=config, row=row)
    assert out.extra_fields["events"] == [{"type": "truncated", "turn": 0, "reason": "max_response_length"}]
    assert out.extra_fields["turns"] == [processor.tokenizer.decode(server.calls[0]["output"].token_ids)]
    assert out.response_mask == [1] * (num_tokens - 2)  # the policy's tokens all the same
    metrics = shared_metrics(out.extra_fields["events"], KINDS)
    assert (metrics["turns"], metrics["truncated_by_policy"], metrics["format_errors"]) == (1.0, 1.0, 0.0)
    assert metrics["actions/invalid"] == 0.0
    # A turn that ends (its stop string) on the budget's last token is whole: the env takes it.
    out, _ = _run(processor, [ANSWER], config=rollout_config(response_length=num_tokens), row=row)
    assert [e["type"] for e in out.extra_fields["events"]] == ["action", "answer"]
    assert out.extra_fields["truncated"] is False


def test_an_image_free_observation_that_does_not_fit_is_not_the_budget(tiny_policy_dir):
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    row = _row(env_kwargs={"max_turns": 40, "num_candidates": 0})
    for length in range(20, 200, 7):
        out, _ = _run(processor, [SEARCH] * 40, config=rollout_config(response_length=length), row=row)
        cut = out.extra_fields["events"][-1]
        if "observation_tokens" in cut:
            assert cut["visual_tokens"] == 0
            metrics = shared_metrics(out.extra_fields["events"], KINDS)
            assert (metrics["truncated_by_observation"], metrics["truncated_by_images"]) == (1.0, 0.0)
            return
    pytest.fail("no response length in 20..200 cut the episode at an observation")


def test_malformed_output_is_an_env_event_and_the_episode_goes_on(processor):
    out, _ = _run(processor, ["no tags at all", ANSWER])
    kinds = [e["type"] for e in out.extra_fields["events"]]
    assert kinds == ["action", "format_error", "action", "answer"]
    metrics = out.extra_fields["episode_metrics"]
    assert (metrics["turns"], metrics["format_errors"], metrics["actions/answer"]) == (2, 1, 1)
    assert out.extra_fields["env_id"] == "Fake-v0"


def test_generated_vision_token_cuts_the_turn(processor):
    out, server = _run(processor, [SEARCH, "<reason>x</reason><|image_pad|><answer>y</answer>"])
    assert len(server.calls) == 2
    assert out.extra_fields["events"][-1] == {
        "type": "truncated",
        "turn": 1,
        "reason": "generated_vision_token",
    }
    assert _num_pads(processor, out.prompt_ids + out.response_ids) == _implied_pads(
        processor, out.multi_modal_data["images"]
    )
    assert out.extra_fields["turns"][-1] == "<reason>x</reason>"


def test_without_logprobs_none_are_returned(processor):
    out, _ = _run(processor, [SEARCH, ANSWER], logprobs=False)
    assert out.response_logprobs is None


def test_text_only_episode_has_no_images(processor):
    out, _ = _run(processor, [ANSWER], row=_row(options={"question": "2+2?", "num_images": 0}))
    assert out.multi_modal_data == {}
    assert _num_pads(processor, out.prompt_ids + out.response_ids) == 0


@pytest.mark.parametrize(
    ("extra_info", "match"),
    [
        ({"index": 7, "env_kwargs": "{}", "env_options": "null"}, r"row 7: extra_info lacks \['env_id'\]"),
        (
            {"index": 7, "env_id": "Fake-v0", "env_kwargs": "{bad", "env_options": "null"},
            "row 7: .*env_kwargs.*JSON",
        ),
        (
            {"index": 7, "env_id": "Fake-v0", "env_kwargs": "[]", "env_options": "null"},
            "row 7: env_kwargs must be",
        ),
        ({"index": 7, "env_id": "Fake-v0", "env_kwargs": "{}", "env_options": "[1]"}, "row 7: .*env_options"),
    ],
)
def test_bad_rows_are_errors_naming_the_row(tiny_policy_dir, extra_info, match):
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    with pytest.raises(ValueError, match=match):
        _run(processor, [ANSWER], row=extra_info)


def test_no_turn_is_asked_for_with_no_room_left(tiny_policy_dir):
    """An observation that fills the response length exactly leaves no token to generate: the episode ends
    there (truncated), instead of asking the server for 0 tokens (vLLM raises that to 1, one past the length,
    and past ``max_model_len`` when the prompt is at its cap)."""
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    row = _row(env_kwargs={"max_turns": 40, "num_candidates": 0})
    exact = 0
    for length in range(20, 160):
        out, server = _run(processor, [SEARCH] * 40, config=rollout_config(response_length=length), row=row)
        assert all(call["params"]["max_tokens"] >= 1 for call in server.calls), length
        assert len(out.response_mask) <= length
        exact += len(out.response_mask) == length and out.response_mask[-1] == 0
    assert exact == 0, "an observation filled the length and the episode went on"
