"""KB-VQA's hooks (``ragym.envs.hooks``): the signature expert and the other scripted policies, the tiny synthetic
KB as toy rows, the longest episode (every batch rejected), the paper recipe, the paper's tables in ``ragym eval``.
This module may import the layers above ``envs``; only the registry loads it, by name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragym.envs.hooks import EnvHooks, EvalTables, SearchProbe, ServedFolder
from ragym.envs.kbvqa.actions import (
    Answer,
    Reject,
    Rerank,
    SearchImage,
    SearchText,
    format_action,
    parse_action,
)
from ragym.envs.kbvqa.policies import POLICIES, SignaturePolicy
from ragym.envs.kbvqa.prompts import LAST_TURN_NOTICE
from ragym.envs.kbvqa.tables import SUBSETS, markdown, na_notes, paper_columns, row_groups
from ragym.envs.scripted import run_episode

_HEADER = re.compile(r"^Candidates for Image \d+", re.MULTILINE)
_CANDIDATE = re.compile(r"^\[\d+\] <image> (.+?)(?: \(signature: [^\s)]+\))?$", re.MULTILINE)


def expert(env: Any, seed: int) -> Any:
    """The signature policy: confirms the candidate whose signature matches the query image's, reads, answers."""
    return SignaturePolicy(env)


NUM_CORPUS_EPISODES = 32
"""Seeded synthetic episodes whose observations join the tiny policies' tokenizer corpus."""
CORPUS_ACTIONS = (
    "<reason>search the image</reason><search_call>SearchImage(1)</search_call>",
    '<reason>look for facts</reason><search_call>SearchText(["history", "location"])</search_call>',
)
"""Actions stepped in each corpus episode so candidate batches and passages join the corpus."""


def tokenizer_corpus() -> Iterator[str]:
    """KB-VQA's system prompt and the first observations of a few seeded episodes (``ragym.rl.tiny.corpus``)."""
    from ragym.envs.registry import make_env

    # A ragym env: gymnasium's API plus ``system_prompt`` (docs/environments.md), which gymnasium.Env lacks.
    env: Any = make_env("KBVQA-v0")
    yield env.system_prompt
    for seed in range(NUM_CORPUS_EPISODES):
        obs, _ = env.reset(seed=seed)
        yield obs["text"]
        for action in CORPUS_ACTIONS:
            yield action
            obs, *_ = env.step(action)
            yield obs["text"]


def toy_rows(out: Path) -> None:
    """The ``tiny`` synthetic KB in ``out``, its rows in ``out/data``."""
    from ragym.data_prep.synthetic_kb import main as build_kb

    if build_kb(["--out", str(out), "--preset", "tiny"]) != 0:
        raise RuntimeError(f"building the tiny synthetic KB in {out} failed")


class LongestKBVQA:
    """Pages every query image to its last batch, reads the last batches' top names, answers.

    ``ragym.envs.kbvqa.policies.SignaturePolicy`` confirms a matching candidate as soon as one is shown; the longest
    episode rejects every batch it may, so this is its own small policy.
    """

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, obs: dict[str, Any]) -> None:
        """Start an episode from the task observation."""
        config = self.env.unwrapped.config
        self.max_rejections, self.max_queries = config.max_rejections, config.max_text_queries
        self.num_images = len(obs["images"])
        self.image, self.rejections, self.names, self.searched_text = 0, 0, [], False

    def act(self, obs_text: str) -> str:
        """Reject until the image's last batch, then the next image; then SearchText; then Answer."""
        if LAST_TURN_NOTICE in obs_text or obs_text.startswith("Results for"):
            return format_action(Answer("unknown"), "answer with what was read")
        if _HEADER.search(obs_text):
            if self.rejections < self.max_rejections:
                self.rejections += 1
                return format_action(Reject(), "no candidate matches the query image")
            self.names += [m.group(1) for m in _CANDIDATE.finditer(obs_text)][:1]
        # The task, an image's last batch, or no batch (boundary, no more candidates, retrieval down): next image.
        self.image, self.rejections = self.image + 1, 0
        if self.image <= self.num_images:
            return format_action(SearchImage(self.image), f"identify the entity in image {self.image}")
        if self.names and not self.searched_text:
            self.searched_text = True
            return format_action(SearchText(tuple(self.names[: self.max_queries])), "read about them")
        return format_action(Answer("unknown"), "answer with what I have")


def longest_episode(env: Any, options: dict[str, Any] | None, seed: int) -> None:
    """Every query image searched and paged to its last batch (Rej_max rejections, so Rej_max + 1 batches of K
    candidates), one SearchText with the last batches' top names, then the answer."""
    run_episode(env, LongestKBVQA(env), seed, options)


def gold_ranks(row: dict[str, Any]) -> tuple[list[int | None], int | None]:
    """Gold ranks in the KB's precomputed candidate lists (the paper's served candidates) and the pool size
    K x (Rej_max + 1): the retriever's ceiling, independent of the policy."""
    from ragym.envs.kbvqa.demo import split_aids
    from ragym.envs.kbvqa.env import KBVQAConfig
    from ragym.envs.kbvqa.kb import load_kb

    info = row["extra_info"]
    kwargs, options = (
        json.loads(v) if isinstance(v, str) else dict(v) for v in (info["env_kwargs"], info["env_options"])
    )
    cfg = KBVQAConfig(**split_aids(kwargs)[1])  # the demo env's aids do not change what is served
    if cfg.kb_dir is None or cfg.candidate_source != "precomputed":
        return [], None
    pool = cfg.candidates_per_batch * (cfg.max_rejections + 1)
    kb = load_kb(cfg.kb_dir)
    retriever = kb.candidate_retriever()
    ranks: list[int | None] = []
    for image, gold in zip(options["query_images"], options["gold_entities"], strict=True):
        if gold is None:  # an evaluation row whose gold entity is unknown: no ceiling to measure
            continue
        docids = [hit.docid for hit in retriever.search(kb.resolve(image), pool)]
        ranks.append(docids.index(gold) if gold in docids else None)
    return ranks, pool


def served_kb(kb_dir: Path, spec: Any) -> dict[str, Any]:
    """``ragym serve --kb-dir``: the KB's image index (vector queries), its candidate lists and the text
    retrievers it lists (``kb.json`` ``text_retrievers``), the ones KBVQA-v0 may ask for."""
    from ragym.envs.kbvqa.kb import load_kb
    from ragym.envs.retrieval.retrievers import IndexSpec
    from ragym.envs.retrieval.service.app import Served
    from ragym.envs.retrieval.service.shards import ShardedRetriever, to_gpu

    kb = load_kb(kb_dir)
    image = kb.image_retriever(IndexSpec(kind=spec.index_kind))
    if spec.gpu is not None:
        for shard in image.shards if isinstance(image, ShardedRetriever) else [image]:
            shard.index = to_gpu(shard.index, spec.gpu)
    # Behind the KB's query-encoder slot: POST /encoder swaps a co-trained version in (ragym.rl.cotrain).
    versioned = kb.versioned_image(IndexSpec(kind=spec.index_kind))
    served = {
        "image": Served(versioned, "vector", int(kb.entity_embeddings.shape[1])),
        "candidates": Served(kb.candidate_retriever(), "text"),
    }
    served.update({kind: Served(kb.text_retriever(kind), "text") for kind in kb.text_retrievers()})
    return served


def env_for_kwargs(kwargs: dict[str, Any]) -> str | None:
    """``KBVQA-Demo-v0`` when ``kwargs`` set any of the CPU demo's aids (``ragym.envs.kbvqa.demo``): ``KBVQA-v0``
    takes none of them."""
    from ragym.envs.kbvqa.demo import AID_FIELDS

    return "KBVQA-Demo-v0" if set(kwargs) & set(AID_FIELDS) else None


def kb_retrievers() -> Any:
    """The tiny synthetic KB's retrievers, as the env builds them in process."""
    from ragym.envs.kbvqa.kb import KBRetrievers, load_kb
    from ragym.envs.registry import synthetic_data

    return KBRetrievers(load_kb(synthetic_data("kbvqa", "tiny")))


HOOKS = EnvHooks(
    name="kbvqa",
    format_action=format_action,
    parse_action=parse_action,
    example_actions=(
        SearchImage(2),
        SearchText(("Cobalt Lorfen Fern", 'a "quoted" name')),
        Rerank("Jade Varmel Moth"),
        Reject(),
        Answer("1732"),
    ),
    expert=expert,
    policies=POLICIES,
    # KB-VQA's episodes are four turns: at 20 passes a fresh toy run once scored no well-formed episode in 16;
    # at 48 a quarter to a half are.
    warm_schedule=(16, 48),
    tokenizer_corpus=tokenizer_corpus,
    toy_rows=toy_rows,
    longest_episode=longest_episode,
    paper_recipe="kbvqa_qwen2_5_vl_7b",
    gold_ranks=gold_ranks,
    eval_tables=EvalTables(
        "MMAgent-R² columns", tuple(SUBSETS), row_groups, paper_columns, markdown, na_notes
    ),
    env_for_kwargs=env_for_kwargs,
    services=(ServedFolder("kb-dir", "KB-VQA knowledge base folder", served_kb),),
    search_probe=SearchProbe(kb_retrievers, (format_action(SearchImage(1), "search"),), "candidates"),
)
