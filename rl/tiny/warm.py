"""A seconds-long warm start for tiny policies of any environment: imitate a scripted expert briefly.

A random tiny policy writes no well-formed action, so every episode of a GRPO group scores the same and the
policy gradient is exactly zero. After a few passes over a scripted expert's episodes the policy plays the
expert's moves only some of the time: rewards differ within a group, and a GRPO step has something to learn
from. Used by ``ragym train --engine verl --toy`` and the trainer tests; the CPU demo has its own, longer
warm start (``ragym.rl.tiny.warm_start``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from ragym.envs.hooks import env_hooks, hook
from ragym.envs.registry import make_env
from ragym.envs.retrieval.search_settings import use_torch_threads
from ragym.envs.scripted import run_episode
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.core.grpo import Sample
from ragym.rl.core.rollout import row_kwargs
from ragym.rl.core.vision import ImageInputs
from ragym.rl.models import load_policy
from ragym.rl.tiny.warm_start import ReplayServer, WarmStartConfig, imitate

logger = logging.getLogger(__name__)


def expert_for(env_id: str, env: Any, seed: int) -> Any:
    """The scripted expert ``env_id``'s hooks register (``EnvHooks.expert``): its protocol played to the end
    (KB-VQA, R3G), or its final action at once (DocMemo answers, MEMORA stops) where playing on needs reading."""
    return hook(env_id, "expert", "the toy warm start")(env, seed)


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
    the envs' ``EnvHooks.warm_schedule``) and save the policy to ``out``.

    ``config`` is a composed recipe (its rollout and data sections build the agent loop that tokenizes the
    turns exactly as training will). torch runs with ragym's threads (one unless ``$OMP_NUM_THREADS``): with
    torch's default (a spinning thread per core) it ran 7-17x slower on a shared 2-core machine
    (``benchmarks/training_threads.py``).
    """
    use_torch_threads()
    env_ids = {dict(row["extra_info"])["env_id"] for row in rows}
    num_rows, default_epochs = max(env_hooks(env_id).warm_schedule for env_id in env_ids)
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
            sample = Sample(
                list(output.prompt_ids),
                list(output.response_ids),
                list(output.response_mask),
                images,
                0.0,
                str(row["extra_info"]["index"]),
            )
            samples.append((sample, 1.0))
    finally:
        loop.close()
    cfg = WarmStartConfig(
        num_episodes=len(rows),
        noise=0.0,
        reject_noise=0.0,
        protocol_share=0.0,
        decision_weight=1.0,
        epochs=epochs,
        batch_size=4,
        lr=LEARNING_RATE,
        seed=seed,
    )
    losses = imitate(model, ImageInputs(processor.image_processor), [samples] * epochs, cfg)
    logger.info(
        "warm start: %d rows x %d epochs, loss %.3f -> %.3f", len(rows), epochs, losses[0], losses[-1]
    )
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    return out
