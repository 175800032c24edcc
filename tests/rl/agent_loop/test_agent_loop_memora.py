"""The ragym_env agent loop on MEMORA-v0 with a scripted policy: events, metrics, and memory on disk."""

from __future__ import annotations

import asyncio
import json

from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.models import load_processor
from tests.rl.fakes import ScriptedServer, rollout_config

SCRIPT = [
    "<reason>plan</reason><decompose><factor p=1>cost price</factor><factor p=1>risk</factor></decompose>",
    "<reason>look</reason><extract f=1><e d=1 s=9>cost</e></extract>",
    "<reason>done</reason><stop></stop>",
]


def test_agent_loop_runs_memora_with_disk_memory(tiny_policy_dir, tmp_path) -> None:
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    config = rollout_config(response_length=8192)
    config.actor_rollout_ref.rollout.prompt_length = (
        4096  # MEMORA's prompt is ~2,000 of the tiny policy's tokens
    )
    loop = make_agent_loop(
        config,
        ScriptedServer(processor.tokenizer, SCRIPT),
        processor.tokenizer,
        processor,
    )
    kwargs = json.dumps({"memory_dir": str(tmp_path)})
    options = json.dumps(
        {"query": "why does zanbredri matter", "qrels": {"synthetic/t7_f0_0.txt": 1}, "domain": "d"}
    )
    row = {"index": 0, "env_id": "MEMORA-v0", "env_kwargs": kwargs, "env_options": options}
    out = asyncio.run(loop.run({"logprobs": False}, extra_info=row))
    types = [e["type"] for e in out.extra_fields["events"]]
    assert types[-2:] == ["final_ranking", "memory_write"] and out.extra_fields["truncated"] is False
    assert out.extra_fields["episode_metrics"]["actions"] == 3.0
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 1  # the next episode's env will read it
