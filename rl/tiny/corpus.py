"""Text the tiny policies' tokenizer is trained on: the chat scaffold, the action grammar, env prompts."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from ragym.rl.agent_loop.chat_template import DEFAULT_SYSTEM_PROMPT

CORPUS_ENV_ID = "KBVQA-v0"
"""Env whose system prompt and observations join the default corpus when it is registered."""

NUM_ENV_EPISODES = 32
"""Seeded synthetic episodes of the corpus env whose observations are added."""

PROBE_ACTIONS = (
    "<reason>search the image</reason><search_call>SearchImage(1)</search_call>",
    '<reason>look for facts</reason><search_call>SearchText(["history", "location"])</search_call>',
)
"""Actions stepped in each corpus episode so candidate batches and passages join the corpus."""

NUM_GRAMMAR_LINES = 400
"""Generated grammar lines in the built-in corpus (enough for the frequent merges of a 2k vocabulary)."""

_WORDS = (
    "the image shows a bird dog cat car tower bridge building flower plant animal species color red blue "
    "green yellow black white large small old new first second third which what where when who how many "
    "year built height located city country river mountain family named known entity candidate batch match "
    "query passage answer question reference similar look alike none of these is the correct one"
).split()

_TEMPLATES = (
    "<reason>{a} {b} {c} {d}.</reason><search_call>SearchImage({i})</search_call>",
    '<reason>{a} {b} {c}.</reason><search_call>SearchText(["{a} {b}", "{c} {d}"])</search_call>',
    "<reason>candidate {i} matches the {a} {b}.</reason><rerank>Entity {i}</rerank>",
    "<reason>no candidate is the {a}.</reason><rerank>Reject()</rerank>",
    "<reason>the {a} of the {b} is {c}.</reason><answer>{c} {d}</answer>",
    "Candidate {i}: Entity {j} <image>\nPassage {i}: The {a} {b} was {c} in {n}.",
    "Question: what is the {a} of the {b} in image {i}?\nImage {i}: <image>",
    "Format error: {a} {b}. Use exactly one action tag per turn.",
)


def builtin_corpus(seed: int = 0) -> Iterator[str]:
    """Deterministic lines covering the ChatML scaffold and the KB-VQA action grammar."""
    rng = random.Random(seed)
    yield f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"
    yield "<|im_start|>assistant\n<|im_end|>\n<tool_response>\n</tool_response>"
    for _ in range(NUM_GRAMMAR_LINES):
        template = rng.choice(_TEMPLATES)
        a, b, c, d = rng.sample(_WORDS, 4)
        yield template.format(
            a=a, b=b, c=c, d=d, i=rng.randint(0, 9), j=rng.randint(0, 999), n=rng.randint(1800, 2025)
        )


def env_corpus(env_id: str = CORPUS_ENV_ID, num_episodes: int = NUM_ENV_EPISODES) -> Iterator[str]:
    """The env's system prompt and first observations of a few seeded episodes; nothing if unregistered."""
    from ragym import envs

    if env_id not in envs.registered_envs():
        return
    # A ragym env: gymnasium's API plus ``system_prompt`` (docs/environments.md), which gymnasium.Env lacks.
    env: Any = envs.make_env(env_id)
    yield env.system_prompt
    for seed in range(num_episodes):
        obs, _ = env.reset(seed=seed)
        yield obs["text"]
        for action in PROBE_ACTIONS:
            yield action
            obs, *_ = env.step(action)
            yield obs["text"]
