"""R3G's hooks (``ragym.envs.hooks``): the caption-cue expert, the tiny synthetic task as toy rows, the longest
episode (judge every pooled image), the paper recipe, the per-scenario evaluation summary. This module may
import the layers above ``envs``; only the registry loads it, by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ragym.envs.hooks import EnvHooks, SearchProbe
from ragym.envs.r3g.actions import Answer, Judge, JudgeScore, Plan, Retrieve, format_action, parse_action
from ragym.envs.r3g.expert import R3GExpert
from ragym.envs.r3g.report import markdown, r3g_summary
from ragym.envs.scripted import run_episode


def expert(env: Any, seed: int) -> Any:
    """Plan, retrieve, judge by the caption cue without noise, answer (``ragym.envs.r3g.expert.R3GExpert``)."""
    return R3GExpert(env, np.random.default_rng(seed), noise=0.0)


def toy_rows(out: Path) -> None:
    """The ``tiny`` synthetic R3G task in ``out``, its rows in ``out/data``."""
    from ragym.data_prep.r3g_synthetic import PRESETS, build_task

    build_task(out, PRESETS["tiny"])


def longest_episode(env: Any, options: dict[str, Any] | None, seed: int) -> None:
    """Plan, retrieve (pool of P), judge every pooled image, answer with the k evidence images."""
    run_episode(env, expert(env, 0), seed, options)


def image_search() -> Any:
    """The tiny synthetic task's coarse image search, as the env builds it in process."""
    from ragym.envs.r3g.corpus import CoarseRetriever, ImageCorpus
    from ragym.envs.registry import synthetic_data
    from ragym.envs.retrieval.hits import NamedRetrievers

    return NamedRetrievers({"image": CoarseRetriever(ImageCorpus.load(synthetic_data("r3g", "tiny")))})


HOOKS = EnvHooks(
    name="r3g",
    format_action=format_action,
    parse_action=parse_action,
    example_actions=(
        Plan("shape, then colour"),
        Retrieve("the query image"),
        Judge(
            (JudgeScore(1, 0.5, 1.0, 0.0, "same shape"), JudgeScore(2, 0.25, 0.0, 1.0, "other colour")), ()
        ),
        Answer("B"),
    ),
    expert=expert,
    # The judge turn scores every pool image (the longest turn any env asks for): more passes to learn it.
    warm_schedule=(8, 48),
    toy_rows=toy_rows,
    longest_episode=longest_episode,
    paper_recipe="r3g_qwen2_5_vl_7b",
    eval_summary=r3g_summary,
    eval_markdown=markdown,
    search_probe=SearchProbe(image_search, ("<plan>the cues</plan>", "<retrieve></retrieve>"), "image"),
)
