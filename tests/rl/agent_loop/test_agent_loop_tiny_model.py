"""The agent loop with a real (tiny) model generating, on the real KB-VQA env.

The strongest alignment check there is: after verl's own post-processing (padding, M-RoPE position ids,
pixel values), one forward pass of the model over prompt + response reproduces, at every mask-1 position,
the log-probability the generation server reported for that token.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.models import load_policy
from ragym.rl.tiny.policy import ARCHS
from tests.rl.fakes import rollout_config, verl_worker

TURN_CAP = 12
"""Tokens per turn this test server allows (a random model rarely stops by itself)."""


class HFGenerateServer:
    """A minimal verl-style server over ``model.generate`` (batch 1, sampling at temperature 1)."""

    def __init__(self, model, processor, seed: int) -> None:
        self.model, self.processor, self.seed = model, processor, seed
        self.num_calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        input_ids = torch.tensor([prompt_ids])
        vision = {}
        if image_data:
            vision = dict(self.processor.image_processor(images=image_data, return_tensors="pt"))
            vision["mm_token_type_ids"] = (input_ids == self.processor.image_token_id).long()
        torch.manual_seed(self.seed + self.num_calls)
        self.num_calls += 1
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            **vision,
            max_new_tokens=min(sampling_params["max_tokens"], TURN_CAP),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            stop_strings=sampling_params["stop"],
            tokenizer=self.processor.tokenizer,
            output_logits=True,
            return_dict_in_generate=True,
        )
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logits = torch.stack(out.logits, dim=1)[0].float()  # [T, V]
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
        return TokenOutput(token_ids=ids, log_probs=logprobs.tolist(), stop_reason="completed")


@pytest.mark.parametrize("arch", ARCHS)
def test_real_model_rollout_logprobs_are_reproduced_by_a_training_forward(arch, tiny_policy_dir):
    model, tokenizer, processor = load_policy(tiny_policy_dir(arch))
    model.eval()
    config = rollout_config(response_length=96, max_assistant_turns=3)
    row = {
        "extra_info": {"index": 1, "env_id": "KBVQA-v0", "env_kwargs": "{}", "env_options": "null"},
        "data_source": "synthetic_kbvqa",
        "reward_model": {"style": "rule", "ground_truth": '["x"]'},
        "raw_prompt": [{"role": "user", "content": "q"}],
    }

    async def episode():
        loop = make_agent_loop(config, HFGenerateServer(model, processor, seed=0), tokenizer, processor)
        worker = verl_worker(processor, config, reward_fn=lambda **kwargs: 0.0)
        output = await loop.run({"temperature": 1.0, "logprobs": True}, **row)
        return output, await worker._agent_loop_postprocess(output, validate=False, **row)

    output, internal = asyncio.run(episode())
    assert len(output.extra_fields["turns"]) >= 2  # at least one observation was appended mid-episode
    assert output.multi_modal_data["images"]

    mm = internal.multi_modal_inputs
    with torch.no_grad():
        logits = (
            model(
                input_ids=internal.input_ids,
                attention_mask=internal.attention_mask,
                position_ids=internal.position_ids.transpose(0, 1),  # verl's (1, 4, L) -> (4, 1, L)
                pixel_values=mm["pixel_values"],
                image_grid_thw=mm["image_grid_thw"],
            )
            .logits[0]
            .float()
        )  # [L, V]
    prompt_width = internal.prompt_ids.shape[1]
    response = internal.response_ids[0]
    logprobs = (
        torch.log_softmax(logits[prompt_width - 1 : -1], dim=-1).gather(-1, response[:, None]).squeeze(-1)
    )
    mask = internal.response_mask[0].bool()
    assert int(mask.sum()) > 0
    torch.testing.assert_close(logprobs[mask], internal.response_logprobs[0][mask], atol=2e-3, rtol=0)
