"""MEMORA's hooks (``ragym.envs.hooks``): a one-turn expert, toy rows of the synthetic domain, the longest
episode (the paper's fixed pipeline, never stopping early), the paper recipe. This module may import the layers
above ``envs``; only the registry loads it, by name."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from ragym.envs.hooks import EnvHooks, SearchProbe
from ragym.envs.memora.actions import Decompose, Extract, Judge, Stop, Subquery, format_action, parse_action
from ragym.envs.memora.env import MemoraConfig
from ragym.envs.scripted import OneTurn

NUM_TOY_ROWS = 16
"""Rows per split (queries of the synthetic domain, in stream order)."""
TOY_KWARGS = {"kc": 12, "doc_chars": 120}
"""The toy rows' env settings beside their memory folder: 12 candidates shown (the paper's K_c is 30) of 120
characters each. The toy policy's episode is one turn (the expert stops at once), so its prompt is nearly all its
sequence, and the CPU actor's attention cost grows with its square: with K_c = 30 the prompts reached 2,879 of the tiny
policy's tokens (MEMORA's separate_async toy run took 898 s in the suite), with these 1,793."""


def expert(env: Any, seed: int) -> Any:
    """Stops at once (the first stage's ranking): playing on needs reading the pool."""
    return OneTurn(format_action(Stop(), "the first stage will do"))


def toy_rows(out: Path) -> None:
    """Queries of the synthetic domain (in stream order), qrels as the ground truth; the train rows write the
    episodic memory in ``out/memory``, the test rows read it frozen (as ``ragym prep bright`` splits)."""
    from ragym.data_prep.toy_data import toy_row, write_splits
    from ragym.envs.memora.corpus import synthetic_collection

    domain = synthetic_collection(0)[0]
    memory = out / "memory"

    def row(index: int, split: str) -> dict[str, Any]:
        query = domain.queries[index % len(domain.queries)]
        options = {
            "query_id": query["id"],
            "query": query["query"],
            "qrels": query["qrels"],
            "excluded_ids": query["excluded_ids"],
            "domain": domain.name,
        }
        truth = {"qrels": query["qrels"], "excluded_ids": query["excluded_ids"]}
        kwargs = {**TOY_KWARGS, "memory_dir": str(memory.resolve()), "memory_frozen": split == "test"}
        return toy_row("MEMORA-v0", index, split, "synthetic_memora", truth, options, kwargs)

    write_splits(
        out / "data",
        {
            split: [row(offset + i, split) for i in range(NUM_TOY_ROWS)]
            for split, offset in (("train", 0), ("test", NUM_TOY_ROWS))
        },
    )


def longest_episode(env: Any, options: dict[str, Any] | None, seed: int) -> None:
    """MEMORA's fixed pipeline (``ragym.envs.memora.pipeline``) with K_max factors, never stopping early:
    decompose, a subquery and an extraction over the whole pool per factor, expansions while the budgets last,
    the judge, stop."""
    from ragym.envs.memora.models import ScriptedModel
    from ragym.envs.memora.pipeline import MemoraPipeline, PipelineConfig

    config = env.unwrapped.config
    pipeline = PipelineConfig(
        num_factors=config.k_max,
        stop_threshold=math.inf,
        expand_below=math.inf,
        max_expansions=config.max_subqueries,
    )
    MemoraPipeline(ScriptedModel(), pipeline).play(env, options, seed)


def first_stage() -> Any:
    """The synthetic domain's first-stage retriever, as the env builds it in process."""
    from ragym.envs.memora.corpus import synthetic_collection
    from ragym.envs.retrieval.hits import NamedRetrievers

    return NamedRetrievers({"first_stage": synthetic_collection(0)[1].retriever})


HOOKS = EnvHooks(
    name="memora",
    format_action=format_action,
    parse_action=functools.partial(parse_action, max_chars=MemoraConfig.max_turn_chars),
    example_actions=(
        Decompose((("a sorting algorithm", 0.6), ("stable", 0.4))),
        Subquery(1, "stable sort in place"),
        Extract(2, ((3, 8.0, "merge sort is stable"), (5, 0.5, "heap sort is not"))),
        Judge((3, 1, 5)),
        Stop(),
    ),
    expert=expert,
    toy_rows=toy_rows,
    toy_prompt_length=2048,  # MEMORA's toy prompts reach 1,793 tokens (the first observation's 12 candidates)
    longest_episode=longest_episode,
    paper_recipe="memora_qwen2_5_vl_7b",
    search_probe=SearchProbe(first_stage, (), "first_stage"),  # reset runs the first stage
)
