"""The agent loop on the real KB-VQA env with a scripted policy: candidate batches arrive as images."""

from __future__ import annotations

import asyncio

import pytest

from ragym import envs
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.models import load_processor
from ragym.rl.tiny.policy import ARCHS
from tests.rl.fakes import ScriptedServer, rollout_config

SCRIPT = [
    "<reason>find it</reason><search_call>SearchImage(1)</search_call>",
    "<reason>none match</reason><rerank>Reject()</rerank>",
    "<reason>enough</reason><answer>unknown</answer>",
]


@pytest.mark.parametrize("arch", ARCHS)
def test_kbvqa_episode_images_events_and_metrics(arch, tiny_policy_dir):
    processor = load_processor(tiny_policy_dir(arch))
    server = ScriptedServer(processor.tokenizer, SCRIPT)
    loop = make_agent_loop(rollout_config(response_length=4096), server, processor.tokenizer, processor)
    row = {"index": 2, "env_id": "KBVQA-v0", "env_kwargs": "{}", "env_options": "null"}
    out = asyncio.run(loop.run({"logprobs": True}, extra_info=row))

    env = envs.make_env("KBVQA-v0")
    obs, _ = env.reset(seed=2)
    num_query = len(obs["images"])
    images = out.multi_modal_data["images"]
    assert [len(call["images"]) for call in server.calls][0] == num_query
    assert len(images) == len(server.calls[-1]["images"]) > num_query  # two candidate batches were appended
    num_pads = sum(1 for t in out.prompt_ids + out.response_ids if t == processor.image_token_id)
    grid = processor.image_processor(images=images, return_tensors="pt")["image_grid_thw"]
    assert num_pads == int(grid.prod(dim=1).sum()) // 4
    types = [e["type"] for e in out.extra_fields["events"]]
    assert types.count("search_image") == 2 and "verification" in types and types[-1] == "answer"
    metrics = out.extra_fields["episode_metrics"]
    assert (metrics["turns"], metrics["searches"], metrics["rejections"]) == (3, 2, 1)
    assert out.extra_fields["truncated"] is False
    assert env.stop_strings == tuple(server.calls[0]["params"]["stop"])
