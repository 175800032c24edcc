"""Partial rollouts on ragym's hf rollout: at a weight update (verl's ``abort_all_requests``, the update, then
``resume_generation``) a turn in flight is aborted and resumed on the new weights by verl's own async client
(``partial_rollout: resume``), or finishes on the weights it began with (``finish``); either way its tokens are
the log-probs of the weights named in its (first, last) version tags, and the agent loop keeps each turn's tags."""

from __future__ import annotations

import asyncio
import copy
import threading
import time

import pytest
import torch
from omegaconf import OmegaConf
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient
from verl.workers.rollout.replica import TokenOutput

from ragym.rl.agent_loop.loop import TURN_VERSIONS, _merge_server_fields
from ragym.rl.models import load_policy
from ragym.rl.verl_plugin.rollout import HFGenerationServer, partial_rollout
from tests.rl.verl_plugin.test_plugin import rollout_config

PROMPT = list(range(20, 60))
BUDGET = 160
"""Tokens a turn may take: long enough that the abort lands while it decodes."""
TOL = 1e-3
"""Largest |log-prob| difference between the server's incremental decode and a full forward of the same weights
(float32); the two weight versions differ by far more."""


class _Handle:
    """What verl's client awaits as a server actor: ``generate.remote(...)``."""

    def __init__(self, server: HFGenerationServer) -> None:
        self.generate = type("Remote", (), {"remote": staticmethod(server.generate)})()


def verl_client(server: HFGenerationServer) -> FullyAsyncLLMServerClient:
    """verl's async client (the one its async modes give the agent loop), routed to ``server`` without Ray."""
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                # full_determinism: verl's client passes the request id through instead of a fresh uuid per turn, so
                # the turn's seed (ragym's turn_seed) and its draws are the same at every run (with a fresh seed a
                # turn could sample a stop before the update landed: make test hung on it once, at 7320d8f)
                "rollout": {"name": "hf", "response_length": BUDGET, "full_determinism": True}
            }
        }
    )
    client = FullyAsyncLLMServerClient(config=config)

    async def acquire(request_id: str, **extra) -> tuple[str, _Handle]:
        return "hf-0", _Handle(server)

    client._acquire_server = acquire  # type: ignore[method-assign]
    client._release_server = lambda *args, **kwargs: None  # type: ignore[method-assign]
    return client


def token_logprobs(model: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    """Teacher-forced log-probs of ``tokens`` after ``PROMPT`` under ``model`` [T]."""
    ids = torch.tensor([PROMPT + tokens])
    with torch.no_grad():
        logits = (
            model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, len(PROMPT) - 1 : -1].float()
        )
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


@pytest.fixture
def versions(tiny_policy_dir):
    """A fresh hf rollout server on version 0, the policy of version 0, and version 1's weights (every weight moved)."""
    path = str(tiny_policy_dir("qwen2_5_vl"))
    server = HFGenerationServer(path, rollout_config(seed=0))
    old = load_policy(path)[0].eval()
    new = copy.deepcopy(old)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in new.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    server.set_global_steps(0)
    return server, old, new


HELD_AT = 4
"""The model call the decode is held at until the update has begun: the prefill, then 3 tokens on version 0."""


async def turn_across_an_update(server: HFGenerationServer, new: torch.nn.Module) -> TokenOutput:
    """One turn through verl's client, with verl's weight update (abort, load version 1, resume) while it decodes.
    The decode thread is held before its 4th model call until the update's abort (or, under ``finish``, its wait)
    has begun, so the update lands after 3 tokens on version 0 however slow the machine is (a wall-clock wait
    here let a loaded machine finish the whole turn on version 0 first)."""
    model = server.server.model
    forward, calls = model.forward, []
    reached, go = threading.Event(), threading.Event()

    def held(*args, **kwargs):
        calls.append(1)
        if len(calls) == HELD_AT:
            reached.set()
            assert go.wait(timeout=120), "the update never began"
        return forward(*args, **kwargs)

    model.forward = held
    params = {"temperature": 1.0, "max_tokens": BUDGET}
    task = asyncio.create_task(verl_client(server).generate("r", prompt_ids=PROMPT, sampling_params=params))
    while not reached.is_set() and not task.done():
        await asyncio.sleep(0.002)
    # A turn that ended before its 4th model call would leave the abort nothing to stop (it returns at once and
    # the wait below would never see it begin): a failure, not a hang.
    assert reached.is_set(), f"the turn ended after {len(calls)} model calls, before the update could land"
    update = asyncio.create_task(server.abort_all_requests())
    deadline = time.monotonic() + 120
    while not (server.num_aborts and (server.partial_rollout != "resume" or server.server.aborting.is_set())):
        assert time.monotonic() < deadline, "the update's abort never began"
        await asyncio.sleep(0.002)
    go.set()
    await update
    server.update_weights(new.state_dict(), global_steps=1)
    await server.resume_generation()
    output = await task
    model.forward = forward
    return output


def test_resume_aborts_the_turn_and_finishes_it_on_the_new_weights(versions):
    server, old, new = versions
    assert server.partial_rollout == "resume"  # the default, verl's partial rollout
    output = asyncio.run(turn_across_an_update(server, new))
    tokens, logprobs = output.token_ids, torch.tensor(output.log_probs)
    assert (output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]) == (0, 1)
    assert server.stats()["num_aborts"] == 1 and len(tokens) == len(logprobs)
    on_old = (logprobs - token_logprobs(old, tokens)).abs() < TOL
    on_new = (logprobs - token_logprobs(new, tokens)).abs() < TOL
    # A prefix came from version 0 and the rest from version 1: the abort split the turn at one token.
    split = int(on_old.long().cumprod(0).sum())
    assert 0 < split < len(tokens), (split, len(tokens))
    assert bool(on_new[split:].all()), on_new.tolist()
    assert not bool(on_old[split:].all())


def test_finish_lets_the_turn_end_on_the_weights_it_began_with(versions):
    server, old, new = versions
    server.partial_rollout = partial_rollout({"partial_rollout": "finish"})
    output = asyncio.run(turn_across_an_update(server, new))
    assert (output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]) == (0, 0)
    logprobs = torch.tensor(output.log_probs)
    assert torch.allclose(logprobs, token_logprobs(old, output.token_ids), atol=TOL)
    # The next turn, after the update, is version 1's.
    after = asyncio.run(
        verl_client(server).generate("r2", prompt_ids=PROMPT, sampling_params={"max_tokens": 8})
    )
    assert after.extra_fields["global_steps"] == 1
    assert torch.allclose(torch.tensor(after.log_probs), token_logprobs(new, after.token_ids), atol=TOL)


def test_a_bad_partial_rollout_setting_is_refused():
    with pytest.raises(ValueError, match="partial_rollout='later': choose one of resume, finish"):
        partial_rollout({"partial_rollout": "later"})


def test_the_agent_loop_keeps_each_turns_versions():
    from ragym.rl.agent_loop.loop import _Episode

    episode = _Episode.__new__(_Episode)
    episode.server_fields, episode.metrics = {}, {}
    for first, last in ((0, 0), (0, 1), (1, 1)):
        fields = {"global_steps": last, "min_global_steps": first, "max_global_steps": last}
        _merge_server_fields(episode, TokenOutput(token_ids=[1], log_probs=[0.0], extra_fields=fields))
    assert episode.server_fields[TURN_VERSIONS] == [[0, 0], [0, 1], [1, 1]]
    assert (episode.server_fields["min_global_steps"], episode.server_fields["max_global_steps"]) == (0, 1)
