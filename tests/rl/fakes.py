"""Test doubles for the agent loop: a small env with the ragym env interface and a scripted server."""

from __future__ import annotations

import zlib
from typing import Any

import gymnasium
import numpy as np
from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.workers.rollout.replica import TokenOutput

from ragym.envs import events as ev
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.metrics import register_metrics

IMAGE_SIZE = 64


@register_metrics("Fake-v0", action_kinds=("search_image", "answer", "invalid"))
def fake_metrics(events: list[dict[str, Any]]) -> dict[str, float | None]:
    """``Fake-v0``'s own metric: candidate batches served."""
    return {"searches": float(sum(e["type"] == "search_image" for e in events))}


class FakeSearchEnv(gymnasium.Env):
    """Search-then-answer env: ``<search>q</search>`` returns two candidate images, ``<answer>`` ends."""

    stop_strings = ("</search>", "</answer>")
    system_prompt = "Use <search>query</search> to see candidates, then <answer>text</answer>."

    def __init__(self, max_turns: int = 4, num_candidates: int = 2) -> None:
        self.max_turns = max_turns
        self.num_candidates = num_candidates
        self.observation_space = gymnasium.spaces.Dict({"text": gymnasium.spaces.Text(4096)})
        self.action_space = gymnasium.spaces.Text(4096)

    def _image(self) -> np.ndarray:
        return self.np_random.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {"question": f"what is shown in episode {seed}?", "num_images": 1}
        self.turn, self.events = 0, []
        images = tuple(self._image() for _ in range(options["num_images"]))
        lines = [f"Image {j}: {IMAGE_PLACEHOLDER}" for j in range(1, len(images) + 1)]
        return {
            "text": "\n".join([*lines, f"Question: {options['question']}"]),
            "images": images,
        }, self._info()

    def _info(self) -> dict[str, Any]:
        return {"events": [dict(e) for e in self.events]}

    def step(self, action: str):
        turn, self.turn = self.turn, self.turn + 1
        if action.count("<answer>") == 1 and action.endswith("</answer>"):
            self.events += [ev.action(turn, "answer", True)]
            self.events += [ev.answer(turn, action.split("<answer>")[1][: -len("</answer>")])]
            return {"text": "", "images": ()}, 0.0, True, False, self._info()
        if action.count("<search>") == 1 and action.endswith("</search>"):
            self.events += [ev.action(turn, "search_image", True)]
            self.events += [kbvqa_ev.search_image(turn, 1, turn, ["a", "b"], None, 0)]
            images = tuple(self._image() for _ in range(self.num_candidates))
            text = "\n".join(f"[{i}] {IMAGE_PLACEHOLDER} entity {i}" for i in range(1, len(images) + 1))
            obs = {"text": text, "images": images}
        else:
            self.events += [ev.action(turn, "invalid", False)]
            self.events += [ev.format_error(turn, "no_action")]
            obs = {"text": "Invalid action: use one tag.", "images": ()}
        if self.turn >= self.max_turns:
            self.events += [ev.truncated(turn, "max_turns")]
            return obs, 0.0, False, True, self._info()
        return obs, 0.0, False, False, self._info()


class ScriptedServer:
    """verl's server interface over scripted texts: tokenized, cut at stop strings, capped at ``max_tokens``.

    Each request id walks its own copy of the script. Texts that hit no stop string end with ``<|im_end|>``
    (like a model emitting EOS). Logprobs are a deterministic function of the token ids.
    """

    def __init__(self, tokenizer: Any, script: list[str]) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.calls: list[dict[str, Any]] = []
        self._position: dict[str, int] = {}

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data=None,
        **kwargs,
    ) -> TokenOutput:
        index = self._position.get(request_id, 0)
        self._position[request_id] = index + 1
        call = {
            "prompt_ids": list(prompt_ids),
            "images": list(image_data or []),
            "params": dict(sampling_params),
        }
        text = self.script[min(index, len(self.script) - 1)]
        stops = [text.find(s) + len(s) for s in sampling_params.get("stop", []) if s in text]
        if stops:
            text = text[: min(stops)]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if not stops:
            ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        ids = ids[: sampling_params["max_tokens"]]
        logprobs = [-(zlib.crc32(str(i).encode()) % 1000) / 1000 - 0.001 for i in ids]
        call["output"] = TokenOutput(
            token_ids=ids,
            log_probs=logprobs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
        )
        self.calls.append(call)
        return call["output"]


def rollout_config(
    response_length: int = 512, max_assistant_turns: int | None = None, prompt_length: int = 1024
) -> DictConfig:
    """The keys of verl's config the agent loop reads (a longer prompt is an error episode)."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "full_determinism": False,
                    "multi_turn": {"max_assistant_turns": max_assistant_turns},
                }
            },
            "data": {},
        }
    )


class _RemoteMethod:
    """Stands in for a Ray actor method: ``.remote(...)`` returns an awaitable."""

    def __init__(self, fn):
        self.remote = fn


class _RewardWorker:
    """What ``reward_loop_worker_handles`` holds: an actor whose ``compute_score`` runs the reward manager."""

    def __init__(self, manager: NaiveRewardManager):
        self.compute_score = _RemoteMethod(manager.run_single)


def verl_worker(processor: Any, config: DictConfig, reward_fn: Any) -> AgentLoopWorker:
    """An ``AgentLoopWorker`` with only the state its post-processing reads (its __init__ needs Ray and a model)."""
    worker = object.__new__(AgentLoopWorker)
    worker.config = config
    worker.rollout_config = config.actor_rollout_ref.rollout
    worker.tokenizer, worker.processor = processor.tokenizer, processor
    worker.mm_processor_kwargs = {}
    worker.distillation_enabled = False
    manager = NaiveRewardManager(config=config, tokenizer=processor.tokenizer, compute_score=reward_fn)
    worker.reward_loop_worker_handles = [_RewardWorker(manager)]
    return worker
