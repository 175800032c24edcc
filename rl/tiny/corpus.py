"""Text the tiny policies' tokenizer is trained on: the chat scaffold, the action grammar, env prompts."""

from __future__ import annotations

import random
from collections.abc import Iterator

from ragym.envs.hooks import hook, one_env_per_hooks
from ragym.rl.agent_loop.chat_template import DEFAULT_SYSTEM_PROMPT

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


def env_corpus() -> Iterator[str]:
    """The text of every env whose hooks give a tokenizer corpus (``EnvHooks.tokenizer_corpus``: KB-VQA's system
    prompt and first observations), in the order of the hooks' names; nothing where none does."""
    for env_id in one_env_per_hooks("tokenizer_corpus"):
        yield from hook(env_id, "tokenizer_corpus", "the tiny tokenizer's corpus")()
