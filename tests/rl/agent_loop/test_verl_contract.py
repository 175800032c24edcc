"""The agent loop's output carries every field verl 0.9.1's trainers read from an agent-loop output.

The v1 trainer tags each trajectory with ``min_global_steps`` / ``max_global_steps`` from ``extra_fields``
(``trainer/ppo/v1/agent_loop_tq.py``) and turns them into ints per step (``trainer_base.py``): a missing
field stopped every recipe at step 1. The legacy trainer stacks ``extra_fields`` keys and metrics per batch.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics
from verl.workers.rollout.replica import TokenOutput

from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.models import load_processor
from tests.rl.agent_loop.test_agent_loop_kbvqa import SCRIPT
from tests.rl.fakes import ScriptedServer, rollout_config

LEGACY_KEYS = {"turn_scores", "tool_rewards", "min_global_steps", "max_global_steps"}
"""``extra_fields`` keys the legacy trainer always stacks (``agent_loop.py``'s default extra keys)."""


class SteppedServer(ScriptedServer):
    """A scripted server that tags outputs with the weights' step, as verl's servers do; the step advances
    after the first turn (a weight sync mid-episode, as in asynchronous training)."""

    def __init__(self, tokenizer, script, steps: list[int | None]) -> None:
        super().__init__(tokenizer, script)
        self.steps = steps

    async def generate(self, request_id, **kwargs) -> TokenOutput:
        output = await super().generate(request_id, **kwargs)
        step = self.steps[min(len(self.calls) - 1, len(self.steps) - 1)]
        output.extra_fields = {"global_steps": step}
        output.num_preempted = 1
        return output


def _episode(tiny_policy_dir, steps: list[int | None]):
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))
    server = SteppedServer(processor.tokenizer, SCRIPT, steps)
    loop = make_agent_loop(rollout_config(response_length=4096), server, processor.tokenizer, processor)
    row = {"index": 0, "env_id": "KBVQA-v0", "env_kwargs": "{}", "env_options": "{}"}
    return asyncio.run(loop.run({"logprobs": True}, extra_info=row, priority=0))


def test_output_carries_the_weights_steps_the_v1_trainer_tags(tiny_policy_dir) -> None:
    out = _episode(tiny_policy_dir, steps=[3, 4, 4])
    fields = out.extra_fields
    assert (fields["min_global_steps"], fields["max_global_steps"], fields["global_steps"]) == (3, 4, 3)
    # What the v1 trainer does with them (trainer_base.py): ints, a span of versions >= 1.
    spans = np.array([fields["max_global_steps"]], dtype=int) - np.array(
        [fields["min_global_steps"]], dtype=int
    )
    assert spans.tolist() == [1]
    assert LEGACY_KEYS <= set(fields)
    # verl's metrics model accepts the loop's metrics; preemptions summed over the three turns.
    metrics = out.metrics
    assert isinstance(metrics, AgentLoopMetrics)
    assert metrics.num_preempted == 3 and metrics.generate_sequences > 0
    assert out.multi_modal_data["images"]


def test_num_turns_counts_messages_as_verls_tool_agent_loop(tiny_policy_dir) -> None:
    """verl logs ``num_turns/{min,max,mean}`` from each output's ``num_turns``, which its own multi-turn loop sets
    to ``user_turns + assistant_turns + 1`` (``tool_agent_loop.py``): the prompt, each generated turn and each
    observation appended after one; the system prompt is no turn. KB-VQA's three scripted turns end at the
    answer, so two observations were appended: 1 + 3 + 2."""
    out = _episode(tiny_policy_dir, steps=[1])
    assert len(out.extra_fields["turns"]) == len(SCRIPT) == 3
    assert len(out.extra_fields["observations"]) == 3  # the task, then one after each of the first two turns
    assert out.num_turns == 1 + 3 + 2


def test_a_server_without_steps_gives_none_not_a_missing_key(tiny_policy_dir) -> None:
    # The local engine's in-process server tags nothing; the keys exist, so the legacy stacking still works.
    fields = _episode(tiny_policy_dir, steps=[None]).extra_fields
    assert fields["min_global_steps"] is None and fields["max_global_steps"] is None
    with pytest.raises(TypeError):  # why the v1 trainer needs a server that tags (verl's, or ragym's hf)
        np.array([fields["min_global_steps"]], dtype=int)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"priority": 7}, "det-7"),  # the legacy worker numbers every sample
        (
            {"session_id": 2, "uid": "random-uuid"},
            "det-5-2",
        ),  # the v1 worker: the row and the sample in its group
    ],
)
def test_full_determinism_names_samples_under_both_workers(kwargs, expected) -> None:
    from ragym.rl.agent_loop.loop import _deterministic_request_id

    assert _deterministic_request_id(5, kwargs) == expected
