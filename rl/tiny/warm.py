"""A seconds-long warm start for tiny policies of any environment: imitate a scripted expert briefly.

A random tiny policy writes no well-formed action, so every episode of a GRPO group scores the same and the
policy gradient is exactly zero. After a few passes over a scripted expert's episodes the policy plays the
expert's moves only some of the time: rewards differ within a group, and a GRPO step has something to learn
from. Used by ``ragym train --engine verl --toy`` and the trainer tests; the CPU demo has its own, longer
warm start (``ragym.rl.demo.warm_start``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ragym.envs.registry import make_env
from ragym.envs.retrieval.search_settings import use_torch_threads
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.demo.warm_start import ReplayServer, WarmStartConfig, imitate
from ragym.rl.engine.grpo import Sample
from ragym.rl.engine.rollout import row_kwargs
from ragym.rl.engine.vision import ImageInputs
from ragym.rl.eval.scripted import run_episode
from ragym.rl.models import load_policy

logger = logging.getLogger(__name__)


class OneTurn:
    """An expert that ends the episode at once with a well-formed final action."""

    def __init__(self, env: Any, text: str) -> None:
        self.env, self.text = env, text

    def reset(self, obs: dict[str, Any]) -> None:
        """Nothing to remember."""

    def act(self, obs_text: str) -> str:
        """The final action."""
        return self.text


def expert_for(env_id: str, env: Any, seed: int) -> Any:
    """A scripted expert for ``env_id``: the env's protocol played to the end (KB-VQA, R3G), or its final
    action at once (DocMemo answers, MEMORA stops) where playing on needs reading the pages or the pool."""
    from ragym.rl.demo.r3g import R3GExpert
    from ragym.rl.eval.scripted import SignaturePolicy

    if env_id in ("KBVQA-v0", "KBVQA-Demo-v0"):
        return SignaturePolicy(env)
    if env_id == "R3G-v0":
        return R3GExpert(env, np.random.default_rng(seed), noise=0.0)
    if env_id == "DocMemo-v0":
        return OneTurn(env, "<reason>not in the summaries</reason><answer>Not answerable</answer>")
    if env_id == "MEMORA-v0":
        return OneTurn(env, "<reason>the first stage will do</reason><stop></stop>")
    raise ValueError(f"no scripted expert for {env_id}")


SCHEDULE = {"KBVQA-v0": (16, 48), "R3G-v0": (8, 48)}
"""(rows, passes) where the default (8 rows, 16 passes) leaves the policy rarely finishing an episode: KB-VQA's
episodes are four turns (at 20 passes a fresh toy run once scored no well-formed episode in 16; at 48 a quarter
to a half are), R3G's judge turn scores every pool image (the longest turn any env asks for)."""
DEFAULT_SCHEDULE = (8, 16)
LEARNING_RATE = 3e-3
"""High for a 0.5M-parameter policy: a few passes make the expert's moves likely, not certain (rewards vary)."""


def warm_start(
    policy_dir: Path,
    rows: list[dict[str, Any]],
    config: Any,
    out: Path,
    *,
    epochs: int | None = None,
    seed: int = 0,
) -> Path:
    """Imitate a scripted expert's episodes on the first of ``rows`` (``expert_for``; how many rows and passes:
    ``SCHEDULE``) and save the policy to ``out``.

    ``config`` is a composed recipe (its rollout and data sections build the agent loop that tokenizes the
    turns exactly as training will). torch runs with ragym's threads (one unless ``$OMP_NUM_THREADS``): with
    torch's default (a spinning thread per core) it ran 7-17x slower on a shared 2-core machine
    (``benchmarks/training_threads.py``).
    """
    use_torch_threads()
    env_ids = {dict(row["extra_info"])["env_id"] for row in rows}
    num_rows, default_epochs = max(SCHEDULE.get(env_id, DEFAULT_SCHEDULE) for env_id in env_ids)
    rows, epochs = rows[:num_rows], epochs or default_epochs
    model, tokenizer, processor = load_policy(policy_dir)
    server = ReplayServer(tokenizer)
    agent_loop = make_agent_loop(config, server, tokenizer, processor)
    loop = asyncio.new_event_loop()
    samples = []
    try:
        for row in rows:
            info = dict(row["extra_info"])
            env = make_env(info["env_id"], **json.loads(info["env_kwargs"]))
            expert = expert_for(info["env_id"], env, seed)
            episode = run_episode(env, expert, int(info["index"]), json.loads(info["env_options"]))
            env.close()
            server.turns = list(episode["turns"])
            output = loop.run_until_complete(
                agent_loop.run({"logprobs": False}, **row_kwargs(row), priority=0)
            )
            images = list((output.multi_modal_data or {}).get("images", []))
            sample = Sample(list(output.prompt_ids), list(output.response_ids), list(output.response_mask),
                            images, 0.0, str(row["extra_info"]["index"]))  # fmt: skip
            samples.append((sample, 1.0))
    finally:
        loop.close()
    cfg = WarmStartConfig(num_episodes=len(rows), noise=0.0, reject_noise=0.0, protocol_share=0.0,
                          decision_weight=1.0, epochs=epochs, batch_size=4, lr=LEARNING_RATE, seed=seed)  # fmt: skip
    losses = imitate(model, ImageInputs(processor.image_processor), [samples] * epochs, cfg)
    logger.info("warm start: %d rows x %d epochs, loss %.3f -> %.3f",
                len(rows), epochs, losses[0], losses[-1])  # fmt: skip
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    return out
