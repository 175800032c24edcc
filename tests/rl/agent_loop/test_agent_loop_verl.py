"""The agent loop's output through verl's own post-processing and streaming reward path.

verl 0.9.1 (``AgentLoopWorker._agent_loop_postprocess`` -> ``_compute_score``) packs each episode's
``extra_fields`` into ``tool_extra_fields``; the reward manager (``NaiveRewardManager.run_single``) merges
them into the row's ``extra_info`` before calling ``custom_reward_function``. These tests run that real
verl code in-process (no Ray) with ``ragym.rewards.verl.compute_score`` as the reward function.
"""

from __future__ import annotations

import asyncio
import functools
import json

import numpy as np
import pytest

import ragym.rl.agent_loop.loop
from ragym.rewards.verl import compute_score
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.models import load_processor
from ragym.rl.tiny.policy import ARCHS
from tests.rl.fakes import FakeSearchEnv, ScriptedServer, rollout_config, verl_worker

RECIPE = {"terms": {"outcome": {"weight": 1.0}, "format": {"weight": 0.5, "params": {"mode": "fraction"}}}}
SCRIPT = ["<reason>a</reason><search>bird</search>", "junk", "<reason>b</reason><answer>a bird</answer>"]


@pytest.mark.parametrize("arch", ARCHS)
def test_extra_fields_reach_the_reward_and_verl_postprocess_accepts_the_output(
    arch, tiny_policy_dir, monkeypatch
):
    monkeypatch.setattr(
        ragym.rl.agent_loop.loop, "make_env", lambda env_id, **kwargs: FakeSearchEnv(**kwargs)
    )
    processor = load_processor(tiny_policy_dir(arch))
    config = rollout_config(response_length=512)
    seen = []

    def reward_fn(**kwargs):
        seen.append(kwargs["extra_info"].copy())
        return compute_score(**kwargs, recipe=RECIPE)

    row = {
        "extra_info": {
            "index": 0,
            "split": "train",
            "env_id": "Fake-v0",
            "env_kwargs": "{}",
            "env_options": "null",
        },
        "data_source": "synthetic_kbvqa",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(["a bird"])},
        "raw_prompt": [{"role": "user", "content": "q"}],
    }

    async def episode():
        # verl's objects bind the event loop they are built in, as they are inside its AgentLoopWorker.
        loop = make_agent_loop(
            config, ScriptedServer(processor.tokenizer, SCRIPT), processor.tokenizer, processor
        )
        worker = verl_worker(processor, config, reward_fn)
        output = await loop.run({"temperature": 1.0, "logprobs": True}, **row)
        return output, await worker._agent_loop_postprocess(output, validate=False, **row)

    output, internal = asyncio.run(episode())

    (extra_info,) = seen
    for key in ("events", "turns", "truncated", "episode_metrics", "env_id"):
        assert extra_info[key] == output.extra_fields[key], key
    assert extra_info["env_options"] == "null"  # the row's own extra_info is kept
    assert internal.reward_score == pytest.approx(1.0 + 0.5 * 2 / 3)
    assert internal.extra_fields["reward_extra_info"]["score"] == internal.reward_score

    input_ids = internal.input_ids[0]
    mm = internal.multi_modal_inputs
    assert len(mm["image_grid_thw"]) == len(output.multi_modal_data["images"]) == 3
    assert (
        int((input_ids == processor.image_token_id).sum()) == int(mm["image_grid_thw"].prod(dim=1).sum()) // 4
    )
    assert mm["pixel_values"].shape[0] == int(mm["image_grid_thw"].prod(dim=1).sum())
    assert internal.position_ids.shape == (1, 4, input_ids.shape[0])  # text + 3 M-RoPE rows
    mask = internal.response_mask[0].numpy()
    assert mask.sum() == sum(output.response_mask)
    assert np.all(internal.response_logprobs[0].numpy()[mask == 0] == 0.0)


def test_reward_function_config_shape_matches_verl_loader():
    """``reward_kwargs`` arrive as keyword arguments, exactly as verl's ``get_custom_reward_fn`` binds them."""
    fn = functools.partial(compute_score, recipe=RECIPE)
    extra_info = {
        "events": [{"type": "action", "turn": 0, "kind": "answer", "well_formed": True}],
        "turns": ["<answer>x</answer>"],
        "truncated": False,
    }
    result = fn(data_source="synthetic_kbvqa", solution_str="", ground_truth='["y"]', extra_info=extra_info)
    assert result["score"] == pytest.approx(0.5)


def test_verl_instantiates_the_loop_from_the_registry_file(tiny_policy_dir):
    """What ``AgentLoopWorker._run_agent_loop`` does with ``recipes/agent_loops/ragym.yaml`` and its kwargs."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    (entry,) = [
        e
        for e in OmegaConf.load("recipes/agent_loops/ragym.yaml")
        if e.name == ragym.rl.agent_loop.loop.AGENT_NAME
    ]
    assert _agent_loop_registry[ragym.rl.agent_loop.loop.AGENT_NAME]["_target_"] == entry["_target_"]
    processor = load_processor(tiny_policy_dir("qwen3_vl"))
    config = rollout_config()
    loop = hydra.utils.instantiate(
        config={"_target_": entry["_target_"]},
        trainer_config=DictConfigWrap(config=config),
        server_manager=None,
        tokenizer=processor.tokenizer,
        processor=processor,
        hf_model_type="qwen3_vl",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )
    assert isinstance(loop, ragym.rl.agent_loop.loop.RagymEnvAgentLoop)
    assert type(loop.continuous_token_builder).__name__ == "QwenVLContinuousTokenBuilder"
