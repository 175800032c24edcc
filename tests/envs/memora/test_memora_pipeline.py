"""MEMORA's fixed pipeline (``ragym.envs.memora.pipeline``) with the scripted model on the synthetic domain:
memory helps, the paper's order and the controller rule, what the judge and extraction see, the LLM-call count."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.envs.events import events_of
from ragym.envs.memora.corpus import synthetic_collection
from ragym.envs.memora.env import MemoraEnv
from ragym.envs.memora.models import ScriptedModel
from ragym.envs.memora.pipeline import MemoraPipeline, PipelineConfig
from ragym.envs.memora.synthetic import FACETS
from ragym.rewards.memora import ranking_ndcg


def stream_ndcg(depth: int, test: range, use_memory: bool = True) -> float:
    domain = synthetic_collection(0)[0]
    env = MemoraEnv()  # the synthetic domain of seed 0, BM25 first stage
    pipeline = MemoraPipeline(ScriptedModel(facets=FACETS, use_memory=use_memory))
    for q in domain.queries[:depth]:
        pipeline.play(env, {"query": q["query"], "qrels": q["qrels"], "domain": "d"})
    env.memory("d").frozen = True
    scores = []
    for i in test:
        q = domain.queries[i]
        info = pipeline.play(env, {"query": q["query"], "qrels": q["qrels"], "domain": "d"})
        scores.append(
            ranking_ndcg(events_of(info["events"], "final_ranking")[0]["ranking"], q["qrels"], set(), 10)
        )
        assert events_of(info["events"], "memory_write")[0]["reason"] == "frozen"
    return float(np.mean(scores))


def test_memory_depth_raises_ndcg_on_held_out_queries() -> None:
    test = range(128, 144)
    none, some, deep = stream_ndcg(0, test), stream_ndcg(40, test), stream_ndcg(120, test)
    assert some > none + 0.1 and deep > some
    assert stream_ndcg(120, test, use_memory=False) < deep - 0.1  # the memory summary routed to decomposition


def test_pipeline_follows_the_paper_order_and_the_controller() -> None:
    env = MemoraEnv()
    info = MemoraPipeline(ScriptedModel(facets=FACETS)).play(env, seed=1)
    kinds = [e["kind"] for e in events_of(info["events"], "action")]
    assert kinds[:7] == ["decompose"] + ["subquery"] * 3 + ["extract"] * 3
    assert kinds[-1] == "stop" and not events_of(info["events"], "protocol_violation")
    assert len(info["turns"]) == len(kinds) and info["turns"][-1].endswith("<stop></stop>")
    # A controller that always stops skips the judge; one that never does judges once.
    eager = MemoraPipeline(ScriptedModel(facets=FACETS), PipelineConfig(stop_threshold=-1.0)).play(
        env, seed=1
    )
    assert "judge" not in [e["kind"] for e in events_of(eager["events"], "action")]
    never = PipelineConfig(stop_threshold=99.0, expand_below=2.0, max_expansions=1)
    info = MemoraPipeline(ScriptedModel(facets=FACETS), never).play(env, seed=1)
    kinds = [e["kind"] for e in events_of(info["events"], "action")]
    assert kinds[7:] == ["subquery", "extract", "judge", "stop"]


class Recording(ScriptedModel):
    """The scripted model, recording what the judge is given and the batch sizes extraction sees."""

    judged: list = []
    batches: list = []

    def extract(self, query, factor, candidates):
        type(self).batches.append(len(candidates))
        return super().extract(query, factor, candidates)

    def judge(self, query, factors, candidates, evidence, memories):
        type(self).judged.append((candidates, evidence, memories))
        return super().judge(query, factors, candidates, evidence, memories)


def test_judge_gets_the_evidence_graph_and_memory_and_extraction_covers_the_pool() -> None:
    domain = synthetic_collection(0)[0]
    env, never_stop = MemoraEnv(), PipelineConfig(stop_threshold=99.0, extract_batch=16)
    for q in domain.queries[:5]:  # other queries' episodes in memory
        MemoraPipeline(ScriptedModel(facets=FACETS)).play(
            env, {"query": q["query"], "qrels": q["qrels"], "domain": "d"}
        )
    Recording.judged, Recording.batches = [], []
    q = domain.queries[5]
    info = MemoraPipeline(Recording(facets=FACETS), never_stop).play(
        env, {"query": q["query"], "domain": "d"}
    )
    ((candidates, evidence, memories),) = Recording.judged
    assert memories and memories == info["view"]["memories"]
    shown = {c["number"] for c in candidates}
    assert evidence and {e["number"] for e in evidence} <= shown
    assert all(e["factor"] in (1, 2, 3) and 0 <= e["weight"] <= 1 for e in evidence)
    # Every extraction scores the whole pool at that point, in batches of at most extract_batch.
    pool, pooled = len(events_of(info["events"], "first_stage")[0]["ranking"]), []
    for event in info["events"]:
        if event["type"] == "subquery":
            pool = event["pool_size"]
        if event["type"] == "factor_evidence":
            pooled.append(pool)
            assert len(event["docs"]) == pool
    assert sum(Recording.batches) == sum(pooled) and max(Recording.batches) <= 16


@pytest.mark.parametrize("num_factors", [1, 2, 3, 5])
def test_llm_calls_follow_the_cost_model_and_one_factor_runs(num_factors: int) -> None:
    """Calls = decompose + a subquery per factor and per expansion + ceil(pool / batch) per extraction +
    judge, counted from the events (Fig. 3's cost axis); N = 1 runs once K_min admits it."""
    domain = synthetic_collection(0)[0]
    env = MemoraEnv(k_min=1)
    pipeline = MemoraPipeline(ScriptedModel(facets=FACETS), PipelineConfig(num_factors=num_factors))
    for q in domain.queries[:8]:
        info = pipeline.play(
            env, {"query": q["query"], "qrels": q["qrels"], "domain": "d", "query_id": q["id"]}
        )
        assert not events_of(info["events"], "protocol_violation") + events_of(info["events"], "format_error")
        assert len(events_of(info["events"], "decompose")[0]["factors"]) == num_factors
        pool, expected = len(events_of(info["events"], "first_stage")[0]["ranking"]), 1
        for event in info["events"]:
            pool = event.get("pool_size", pool) if event["type"] == "subquery" else pool
            expected += {"subquery": 1, "verdict": 1}.get(event["type"], 0)
            expected += -(-pool // 30) if event["type"] == "factor_evidence" else 0
        assert info["llm_calls"]["total"] == expected


class Hallucinating(ScriptedModel):
    """A model that, besides its answer, names a candidate it was never shown (an LLM's slip)."""

    def extract(self, query, factor, candidates):
        return [*super().extract(query, factor, candidates), (999, 9.0, "made up")]

    def judge(self, query, factors, candidates, evidence, memories):
        return [999, *super().judge(query, factors, candidates, evidence, memories)]


def test_a_candidate_number_the_model_was_not_shown_costs_only_that_entry() -> None:
    """One made-up number in an extraction or verdict answer made the env refuse the whole turn (bad_candidate):
    the factor lost all its evidence and the judge its verdict. The pipeline now keeps the answer's entries for
    candidates the call was shown, and counts the others in ``info["unknown_candidates"]``."""
    env = MemoraEnv()
    never_stop = PipelineConfig(stop_threshold=99.0)
    info = MemoraPipeline(Hallucinating(facets=FACETS), never_stop).play(env, seed=1)
    assert not events_of(info["events"], "protocol_violation")
    honest = MemoraPipeline(ScriptedModel(facets=FACETS), never_stop).play(env, seed=1)
    assert events_of(info["events"], "final_ranking") == events_of(honest["events"], "final_ranking")
    extracts = info["llm_calls"]["extract"]
    assert info["unknown_candidates"] == {"extract": extracts, "judge": 1}
    # A verdict of unknown numbers alone is no judge turn (an empty <judge> would be a format error).
    lost = MemoraPipeline(LostJudge(facets=FACETS), never_stop).play(env, seed=1)
    kinds = [e["kind"] for e in events_of(lost["events"], "action")]
    assert "judge" not in kinds and kinds[-1] == "stop" and not events_of(lost["events"], "format_error")
    assert lost["unknown_candidates"]["judge"] == 1


class LostJudge(ScriptedModel):
    def judge(self, query, factors, candidates, evidence, memories):
        return [999]


class FindsNothing(ScriptedModel):
    """An extraction that finds nothing bearing on the factor (an LLM may answer ``{"evidence": []}``)."""

    def extract(self, query, factor, candidates):
        return []


def test_an_extraction_that_finds_nothing_sends_no_malformed_turn() -> None:
    """With no evidence the pipeline wrote ``<extract f=1></extract>``, which the grammar refuses (bad_extract): a
    format error and a turn spent per factor. Such an extraction is now no turn; the calls still count."""
    info = MemoraPipeline(FindsNothing(facets=FACETS)).play(MemoraEnv(), seed=1)
    assert not events_of(info["events"], "format_error")
    kinds = [e["kind"] for e in events_of(info["events"], "action")]
    assert "extract" not in kinds and kinds[-1] == "stop"
    assert info["llm_calls"]["extract"] >= 3
