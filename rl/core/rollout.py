"""Episodes for the local engine: the ragym agent loop against the in-process server, scored by the rubric.

Rewards go through ``ragym.rewards.verl.compute_score``, the same seam verl's reward loop calls on the cluster,
with the agent loop's ``extra_fields`` merged into ``extra_info`` as verl merges them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from ragym.envs.image_ref import ImageRef
from ragym.rewards.verl import compute_score
from ragym.rl.core.grpo import Sample


@dataclass
class EpisodeResult:
    """One finished, scored episode."""

    row_index: int
    """Index of the dataset row (its ``extra_info.index``)."""
    uid: str
    """GRPO group id (one per row per step)."""
    output: AgentLoopOutput
    """The agent loop's output: prompt/response ids, mask, extra fields, and its images by reference
    (``multi_modal_data["images"]``: ``ImageRef``s, ``by_reference``)."""
    score: dict[str, float]
    """``compute_score``'s result: ``score`` (the total) and ``reward/<term>`` values."""
    stats: dict[str, float | None] = field(default_factory=dict)
    """Episode metrics from the env's events (``ragym.envs.metrics``, as the agent loop computed them)."""

    @property
    def reward(self) -> float:
        """The rubric total."""
        return float(self.score["score"])

    def sample(self) -> Sample:
        """The episode as the GRPO update sees it."""
        logprobs = self.output.response_logprobs
        return Sample(
            prompt_ids=list(self.output.prompt_ids),
            response_ids=list(self.output.response_ids),
            response_mask=list(self.output.response_mask),
            images=list((self.output.multi_modal_data or {}).get("images", [])),
            reward=self.reward,
            uid=self.uid,
            rollout_log_probs=None if logprobs is None else list(logprobs),
        )


@dataclass
class RolloutTimes:
    """Wall-clock split of one rollout phase (seconds)."""

    total: float = 0.0
    generate: float = 0.0
    env: float = 0.0
    reward: float = 0.0


def by_reference(output: AgentLoopOutput) -> AgentLoopOutput:
    """``output`` with its images replaced by the agent loop's references to them (``extra_fields["image_refs"]``):
    what the step's batch, the dynamic-sampling rounds and the rollout-ahead queue hold, so a batch costs a few
    hundred bytes per image, not its pixels; the update resolves them through the image cache."""
    images = (output.multi_modal_data or {}).get("images", [])
    refs: list[ImageRef] = list(output.extra_fields.get("image_refs", []))
    if len(refs) != len(images):
        raise ValueError(
            f"the agent loop's output has {len(images)} images but {len(refs)} references to them"
        )
    output.multi_modal_data = {"images": refs} if refs else {}
    return output


def row_kwargs(row: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments verl's agent-loop worker passes to ``run`` for one dataset row."""
    return {
        "raw_prompt": list(row["prompt"]),
        "data_source": row["data_source"],
        "reward_model": row["reward_model"],
        "extra_info": dict(row["extra_info"]),
        "index": row["extra_info"]["index"],
    }


async def _episode(
    agent_loop: Any, server: Any, row: dict[str, Any], sampling: dict[str, Any], priority: int
) -> AgentLoopOutput:
    try:
        return await agent_loop.run(dict(sampling), **row_kwargs(row), priority=priority)
    finally:
        server.episode_done()


def run_episodes(
    loop: asyncio.AbstractEventLoop,
    agent_loop: Any,
    server: Any,
    rows: list[dict[str, Any]],
    num_per_row: int,
    sampling: dict[str, Any],
    reward_kwargs: dict[str, Any],
    group_prefix: str,
) -> tuple[list[EpisodeResult], RolloutTimes]:
    """``num_per_row`` concurrent episodes of every row (one GRPO group each), scored; plus the time split."""
    start, generate_before = time.perf_counter(), server.stats.generate_s
    server.track_episodes(len(rows) * num_per_row)
    # ``priority``: a unique number per episode, as verl's worker gives (the agent loop's request id under
    # ``rollout.full_determinism``).
    tasks = [
        _episode(agent_loop, server, row, sampling, i * num_per_row + j)
        for i, row in enumerate(rows)
        for j in range(num_per_row)
    ]
    outputs = [by_reference(o) for o in loop.run_until_complete(asyncio.gather(*tasks))]
    times = RolloutTimes(generate=server.stats.generate_s - generate_before)
    times.env = sum(float(o.metrics.tool_calls) for o in outputs)
    reward_start = time.perf_counter()
    results = []
    for i, output in enumerate(outputs):
        row = rows[i // num_per_row]
        extra_info = {**dict(row["extra_info"]), **output.extra_fields}
        score = compute_score(
            row["data_source"],
            "",
            row["reward_model"]["ground_truth"],
            extra_info=extra_info,
            **reward_kwargs,
        )
        index = int(row["extra_info"]["index"])
        stats = dict(output.extra_fields["episode_metrics"])
        stats["response_length"] = float(sum(output.response_mask))
        # The group id names the row's position too: rows of a mixed file (``ragym prep mix``) share indices.
        group = f"{group_prefix}-{i // num_per_row}-{index}"
        results.append(EpisodeResult(index, group, output, score, stats))
    times.reward = time.perf_counter() - reward_start
    times.total = time.perf_counter() - start
    return results, times
