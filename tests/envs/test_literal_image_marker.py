"""A literal ``<image>`` in data or in the policy's own text never adds an image marker to an observation.

The agent loop places one image per marker and ends an episode whose counts differ in error, so a document,
question or echoed query that contains the marker text would break episodes (found by ``ragym budget``, whose
fixture documents quoted ragym's own docs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ragym import envs
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.kbvqa.actions import Rerank, SearchImage, SearchText, format_action
from ragym.envs.memora.env import MemoraEnv
from ragym.envs.retrieval.hits import NamedRetrievers
from tests.envs.fakes import write_corpus
from tests.envs.memora.test_memora import FakeRetriever, turn

LITERAL = f"what does {IMAGE_PLACEHOLDER} show"


def _markers_match(obs: dict) -> bool:
    return obs["text"].count(IMAGE_PLACEHOLDER) == len(obs["images"])


def test_kbvqa_question_an_echoed_text_query_and_an_unknown_rerank_name(tiny_kb: Path) -> None:
    frame = pd.read_parquet(tiny_kb / "data" / "train.parquet")
    options = {**json.loads(frame.iloc[0]["extra_info"]["env_options"]), "question": LITERAL}
    env = envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb))
    obs, _ = env.reset(options=options)
    assert _markers_match(obs) and "what does (image) show" in obs["text"]
    obs, *_ = env.step(format_action(SearchText([LITERAL])))
    assert _markers_match(obs) and '"what does (image) show"' in obs["text"]
    obs, *_ = env.step(format_action(SearchImage(1)))
    assert _markers_match(obs) and len(obs["images"]) > 0
    obs, *_ = env.step(format_action(Rerank(LITERAL)))  # no such candidate: the notice echoes the name
    assert _markers_match(obs) and "'what does (image) show' is not a candidate" in obs["text"]


def test_r3g_question_and_the_echoed_plan(r3g_task: Path) -> None:
    frame = pd.read_parquet(r3g_task / "data" / "train.parquet")
    options = {**json.loads(frame.iloc[0]["extra_info"]["env_options"]), "question": LITERAL}
    env = envs.make_env("R3G-v0", task_dir=str(r3g_task))
    obs, _ = env.reset(options=options)
    assert _markers_match(obs) and len(obs["images"]) == 1
    for action in (f"<plan>find {IMAGE_PLACEHOLDER} cues</plan>", "<retrieve></retrieve>"):
        obs, *_ = env.step(action)
        assert _markers_match(obs)


def test_memora_query_documents_and_echoed_factors(tmp_path: Path) -> None:
    texts = {"a": f"alpha {IMAGE_PLACEHOLDER} one", "b": "beta two", "c": "gamma", "d": "delta"}
    corpus, first_stage = write_corpus(texts, tmp_path), NamedRetrievers({"first_stage": FakeRetriever()})
    env = MemoraEnv(corpus_path=corpus, retriever=first_stage, k0=4, kc=4, k=2, k_min=1)
    obs, _ = env.reset(options={"query": LITERAL, "domain": "toy"})
    assert _markers_match(obs) and "alpha (image) one" in obs["text"]
    obs, *_ = env.step(turn(f"<decompose><factor p=1>{IMAGE_PLACEHOLDER} x</factor></decompose>"))
    assert _markers_match(obs) and "(image) x" in obs["text"]
