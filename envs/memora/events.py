"""MEMORA-v0's own event kinds, one constructor each (documents are corpus ids;
factors are 1-based, as the policy writes ``f=k``).

The kinds every env records (``action``, ``format_error``, ``answer``, ...) are made by ``ragym.envs.events``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragym.envs.events import (
    Event,
    bool_field,
    float_field,
    float_list,
    int_field,
    int_list,
    make_event,
    register_event_kinds,
    str_field,
    str_list,
)

KINDS = (
    "memory_read",
    "first_stage",
    "decompose",
    "subquery",
    "factor_evidence",
    "verdict",
    "final_ranking",
    "memory_write",
)
"""The event kinds MEMORA-v0 adds to the shared vocabulary."""
register_event_kinds(*KINDS)


def memory_read(
    domain: str, num_records: int, similarities: Sequence[float], queries: Sequence[str]
) -> Event:
    """Emitted by ``reset`` (turn -1): the K_m nearest memories shown; ``hits`` (their count) is derived."""
    sims = float_list("memory_read", "similarities", similarities)
    shown = str_list("memory_read", "queries", queries)
    if len(sims) != len(shown):
        raise ValueError(f"memory_read event: {len(sims)} similarities for {len(shown)} queries")
    return make_event(
        "memory_read",
        -1,
        domain=str_field("memory_read", "domain", domain),
        num_records=int_field("memory_read", "num_records", num_records, minimum=0),
        hits=len(shown),
        similarities=sims,
        queries=shown,
    )


def first_stage(
    query_id: str | None, ranking: Sequence[str], scores: Sequence[float], ndcg: float | None = None
) -> Event:
    """Emitted by ``reset``: the first stage's top-K_0 (excluded ids removed), best first, and its nDCG@K (None
    without qrels), which the metrics of an episode the env then ended by raising read."""
    docs = str_list("first_stage", "ranking", ranking)
    scored = float_list("first_stage", "scores", scores)
    if len(docs) != len(scored):
        raise ValueError(f"first_stage event: {len(scored)} scores for {len(docs)} documents")
    query = str_field("first_stage", "query_id", query_id, optional=True)
    value = None if ndcg is None else float_field("first_stage", "ndcg", ndcg)
    return make_event("first_stage", -1, query_id=query, ranking=docs, scores=scored, ndcg=value)


def decompose(
    turn: int,
    factors: Sequence[str],
    priorities: Sequence[float],
    used: Sequence[float],
    priors: Sequence[Sequence[int]],
) -> Event:
    """Factors, the policy's priorities, the priorities used after the memory prior, and (h, l) per factor."""
    texts = str_list("decompose", "factors", factors)
    lists = {"priorities": priorities, "used": used, "priors": priors}
    if any(len(v) != len(texts) for v in lists.values()):
        raise ValueError(f"decompose event: every list needs {len(texts)} entries, one per factor")
    return make_event(
        "decompose",
        turn,
        factors=texts,
        priorities=float_list("decompose", "priorities", priorities),
        used=float_list("decompose", "used", used),
        priors=[int_list("decompose", f"priors[{i}]", p) for i, p in enumerate(priors)],
    )


def subquery(
    turn: int, factor: int, text: str, retrieved: Sequence[str], added: Sequence[str], pool_size: int
) -> Event:
    """A subquery for ``factor``: what it retrieved and which documents joined the pool."""
    got, new = str_list("subquery", "retrieved", retrieved), str_list("subquery", "added", added)
    if not set(new) <= set(got):
        raise ValueError("subquery event: added documents must be among the retrieved ones")
    return make_event(
        "subquery",
        turn,
        factor=int_field("subquery", "factor", factor, minimum=1),
        text=str_field("subquery", "text", text),
        retrieved=got,
        added=new,
        pool_size=int_field("subquery", "pool_size", pool_size, minimum=0),
    )


def factor_evidence(
    turn: int, factor: int, docs: Sequence[str], weights: Sequence[float], snippets: Sequence[str]
) -> Event:
    """Graph edges for ``factor``: documents, normalised weights in [0, 1], snippets."""
    names, ws = str_list("factor_evidence", "docs", docs), float_list("factor_evidence", "weights", weights)
    texts = str_list("factor_evidence", "snippets", snippets)
    if not len(names) == len(ws) == len(texts):
        raise ValueError("factor_evidence event: docs, weights and snippets differ in length")
    if any(not 0.0 <= w <= 1.0 for w in ws):
        raise ValueError(f"factor_evidence event: weights must be in [0, 1], got {ws}")
    factor = int_field("factor_evidence", "factor", factor, minimum=1)
    return make_event("factor_evidence", turn, factor=factor, docs=names, weights=ws, snippets=texts)


def verdict(turn: int, order: Sequence[str]) -> Event:
    """The judge's listwise verdict, best first."""
    return make_event("verdict", turn, order=str_list("verdict", "order", order))


def final_ranking(
    turn: int,
    ranking: Sequence[str],
    scores: Sequence[float],
    k: int,
    forced: bool,
    margin: float,
    support: float,
) -> Event:
    """The whole pool in final order (the env's answer is its top ``k``); ``forced`` when a budget ended it."""
    docs, scored = (
        str_list("final_ranking", "ranking", ranking),
        float_list("final_ranking", "scores", scores),
    )
    if len(docs) != len(scored):
        raise ValueError(f"final_ranking event: {len(scored)} scores for {len(docs)} documents")
    return make_event(
        "final_ranking",
        turn,
        ranking=docs,
        scores=scored,
        k=int_field("final_ranking", "k", k, minimum=1),
        forced=bool_field("final_ranking", "forced", forced),
        margin=float_field("final_ranking", "margin", margin),
        support=float_field("final_ranking", "support", support),
    )


def memory_write(
    turn: int,
    domain: str,
    written: bool,
    reason: str,
    ndcg: float | None,
    first_stage_ndcg: float | None,
    outcomes: Sequence[str],
) -> Event:
    """The episode's memory write: ``reason`` ``written`` | ``frozen`` | ``no_qrels``, the outcome (nDCG@K of
    the final and of the first-stage ranking, None without qrels) and each factor's outcome."""
    kind = "memory_write"
    return make_event(
        kind,
        turn,
        domain=str_field(kind, "domain", domain),
        written=bool_field(kind, "written", written),
        reason=str_field(kind, "reason", reason),
        ndcg=None if ndcg is None else float_field(kind, "ndcg", ndcg),
        first_stage_ndcg=None
        if first_stage_ndcg is None
        else float_field(kind, "first_stage_ndcg", first_stage_ndcg),
        outcomes=str_list(kind, "outcomes", outcomes),
    )
