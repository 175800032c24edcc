"""The event vocabulary environments record in ``info["events"]``; rewards and metrics read nothing else.

Every event is a JSON-serialisable dict with at least ``type`` and ``turn`` (0-based index of the policy
turn that caused it; events emitted by ``reset`` carry ``turn`` -1). Events travel from the env through
verl's ``extra_fields`` to the reward, and are saved in episode jsonl files, so they hold only plain data
(str, int, float, bool, None, list, dict).

Each event kind has one constructor below; it checks the field types and returns the plain dict, so the
schema is checked in one place. Environments, synthetic fixtures and tests build events only through
these. The file has one section per environment: a new env appends its own section at the end and lists
its kinds in its own tuple (``EVENT_KINDS`` collects them all).
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

Event = dict[str, Any]
"""One event: plain JSON data with ``type`` and ``turn``."""

EVENT_KINDS: set[str] = set()
"""Every event ``type`` some constructor below makes (each env section adds its own)."""


def events_of(events: list[Event], kind: str) -> list[Event]:
    """The events of one type, in order."""
    return [e for e in events if e["type"] == kind]


# ----- field checks (a bad field is an env bug: the error names the event and the field) ---------------
def _int(kind: str, name: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{kind} event: {name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{kind} event: {name} must be >= {minimum}, got {value}")
    return int(value)


def _float(kind: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{kind} event: {name} must be a number, got {value!r}")
    return float(value)


def _str(kind: str, name: str, value: Any, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(
            f"{kind} event: {name} must be a string{' or None' if optional else ''}, got {value!r}"
        )
    return value


def _bool(kind: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{kind} event: {name} must be a bool, got {value!r}")
    return value


def _strs(kind: str, name: str, values: Sequence[Any], optional: bool = False) -> list[str | None]:
    return [_str(kind, f"{name}[{i}]", v, optional) for i, v in enumerate(_seq(kind, name, values))]


def _ints(kind: str, name: str, values: Sequence[Any]) -> list[int]:
    return [_int(kind, f"{name}[{i}]", v) for i, v in enumerate(_seq(kind, name, values))]


def _floats(kind: str, name: str, values: Sequence[Any]) -> list[float]:
    return [_float(kind, f"{name}[{i}]", v) for i, v in enumerate(_seq(kind, name, values))]


def _seq(kind: str, name: str, values: Any) -> Sequence[Any]:
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise TypeError(f"{kind} event: {name} must be a list, got {values!r}")
    return values


def _event(event_type: str, turn: int, /, **fields: Any) -> Event:
    return {"type": event_type, "turn": _int(event_type, "turn", turn, minimum=-1), **fields}


# ===== Shared kinds (every env) =========================================================================
SHARED_KINDS = (
    "action", "format_error", "protocol_violation", "truncated", "answer", "retrieval_error", "episode_error",
)  # fmt: skip
EVENT_KINDS.update(SHARED_KINDS)


def action(turn: int, kind: str, well_formed: bool) -> Event:
    """One per policy turn: the parsed action's ``kind`` (env-specific, ``invalid`` when unparsable)."""
    return _event(
        "action",
        turn,
        kind=_str("action", "kind", kind),
        well_formed=_bool("action", "well_formed", well_formed),
    )


def format_error(turn: int, reason: str) -> Event:
    """The turn could not be parsed; ``reason`` is a short machine-readable code (the parser's)."""
    return _event("format_error", turn, reason=_str("format_error", "reason", reason))


def protocol_violation(turn: int, reason: str, **where: Any) -> Event:
    """A well-formed action the protocol forbids (it changes no state); ``where`` says where it applied.

    KB-VQA's ``where`` keys: ``image``, ``batch_id``, ``entity``, ``decision``; DocMemo's: ``pages``.
    """
    checks = {"image": _int, "batch_id": _int, "entity": _optional_str, "decision": _str, "pages": _ints}
    unknown = set(where) - set(checks)
    if unknown:
        raise TypeError(f"protocol_violation event: unknown fields {sorted(unknown)}")
    fields = {k: checks[k]("protocol_violation", k, v) for k, v in where.items()}
    return _event("protocol_violation", turn, reason=_str("protocol_violation", "reason", reason), **fields)


def _optional_str(kind: str, name: str, value: Any) -> str | None:
    return _str(kind, name, value, optional=True)


def truncated(
    turn: int, reason: str, observation_tokens: int | None = None, visual_tokens: int | None = None
) -> Event:
    """A budget ended the episode (``max_turns``, ``max_response_length``, ``generated_vision_token``, ...).

    When an observation the env served did not fit the response length, the agent loop records its size:
    ``observation_tokens`` (text and images) and ``visual_tokens`` (its images' share, set by the recipe's image
    budget), so a truncation the budget caused is told apart from the policy's own (``None`` otherwise).
    """
    fields: dict[str, Any] = {}
    if observation_tokens is not None:
        fields["observation_tokens"] = _int("truncated", "observation_tokens", observation_tokens, 0)
        fields["visual_tokens"] = _int("truncated", "visual_tokens", visual_tokens or 0, 0)
    return _event("truncated", turn, reason=_str("truncated", "reason", reason), **fields)


def answer(turn: int, text: str, forced: bool = False) -> Event:
    """The final answer; ``forced`` when the truncation rule produced it (KB-VQA: the empty string)."""
    return _event("answer", turn, text=_str("answer", "text", text), forced=_bool("answer", "forced", forced))


def retrieval_error(turn: int, retriever: str, reason: str, detail: str) -> Event:
    """A search got no answer from the retrieval service (the policy was told retrieval is unavailable).

    ``reason``: ``timeout``, ``connection``, ``server_error`` or ``circuit_open`` (``ragym.envs.retrieval.service.client``).
    """
    return _event(
        "retrieval_error",
        turn,
        retriever=_str("retrieval_error", "retriever", retriever),
        reason=_str("retrieval_error", "reason", reason),
        detail=_str("retrieval_error", "detail", detail),
    )


def episode_error(turn: int, stage: str, error: str) -> Event:
    """The env raised and the episode ended there (a missing file, a dead service): recorded, not fatal.

    ``stage``: ``reset`` (the env could not be built or reset; ``turn`` -1) or ``step`` (``turn`` is the policy
    turn the env could not take); ``error``: the exception's type and first line. The agent loop records it.
    """
    if stage not in ("reset", "step"):
        raise ValueError(f"episode_error event: stage must be reset or step, got {stage!r}")
    return _event("episode_error", turn, stage=stage, error=_str("episode_error", "error", error))


# ===== KBVQA-v0 (envs/kbvqa/env.py): images are 1-based, as the policy writes SearchImage(j) ==============
KBVQA_KINDS = ("task", "search_image", "search_text", "verification", "boundary")
EVENT_KINDS.update(KBVQA_KINDS)


def task(
    num_images: int,
    gold_entities: Sequence[str | None],
    max_rejections: int,
    candidates_per_batch: int,
    max_turns: int,
    text_retriever: str | None = None,
) -> Event:
    """Emitted by ``reset`` (turn -1): the episode's images, gold entities and the limits it runs with.

    Metrics read the image count from it (Ident. needs every image, searched or not) and the verification
    reward reads Rej_max from it, so a reward recipe cannot silently score with another limit.
    ``text_retriever`` is what SearchText searches (``bm25`` or ``dense``; None where no env says), so an
    evaluation reports which text search its numbers came from.
    """
    gold = _strs("task", "gold_entities", gold_entities, optional=True)
    num = _int("task", "num_images", num_images, minimum=1)
    if len(gold) != num:
        raise ValueError(f"task event: {len(gold)} gold_entities for {num} images")
    return _event(
        "task",
        -1,
        num_images=num,
        gold_entities=gold,
        max_rejections=_int("task", "max_rejections", max_rejections, minimum=0),
        candidates_per_batch=_int("task", "candidates_per_batch", candidates_per_batch, minimum=1),
        max_turns=_int("task", "max_turns", max_turns, minimum=1),
        text_retriever=_str("task", "text_retriever", text_retriever, optional=True),
    )


def search_image(
    turn: int,
    image: int,
    batch_id: int,
    candidates: Sequence[str],
    gold_entity: str | None,
    offset: int,
) -> Event:
    """A candidate batch was served (``gold_in_batch`` is derived here, so it cannot disagree)."""
    names = _strs("search_image", "candidates", candidates)
    gold = _str("search_image", "gold_entity", gold_entity, optional=True)
    return _event(
        "search_image",
        turn,
        image=_int("search_image", "image", image, minimum=1),
        batch_id=_int("search_image", "batch_id", batch_id, minimum=0),
        candidates=names,
        gold_entity=gold,
        gold_in_batch=gold is not None and gold in names,
        offset=_int("search_image", "offset", offset, minimum=0),
    )


def search_text(turn: int, queries: Sequence[str], passage_ids: Sequence[str]) -> Event:
    """Passages were returned for the queries (``num_passages`` is derived)."""
    ids = _strs("search_text", "passage_ids", passage_ids)
    return _event(
        "search_text",
        turn,
        queries=_strs("search_text", "queries", queries),
        num_passages=len(ids),
        passage_ids=ids,
    )


def verification(
    turn: int,
    decision: str,
    entity: str | None,
    image: int,
    batch_id: int,
    candidates: Sequence[str],
    gold_entity: str | None,
) -> Event:
    """The first decision on a batch; ``gold_in_batch`` and ``correct`` (Rerank(e*), or Reject when e* is not
    in the batch) are derived from the batch here."""
    if decision not in ("rerank", "reject"):
        raise ValueError(f"verification event: decision must be 'rerank' or 'reject', got {decision!r}")
    entity = _str("verification", "entity", entity, optional=True)
    if (entity is None) != (decision == "reject"):
        raise ValueError(
            f"verification event: a {decision} {'needs' if decision == 'rerank' else 'takes no'} entity"
        )
    names = _strs("verification", "candidates", candidates)
    gold = _str("verification", "gold_entity", gold_entity, optional=True)
    in_batch = gold is not None and gold in names
    return _event(
        "verification",
        turn,
        decision=decision,
        entity=entity,
        image=_int("verification", "image", image, minimum=1),
        batch_id=_int("verification", "batch_id", batch_id, minimum=0),
        candidates=names,
        gold_entity=gold,
        gold_in_batch=in_batch,
        correct=entity == gold if decision == "rerank" else not in_batch,
    )


def boundary(turn: int, image: int, rejections: int) -> Event:
    """The boundary prompt was returned instead of a batch; ``rejections``: the image's rejections so far."""
    return _event(
        "boundary",
        turn,
        image=_int("boundary", "image", image, minimum=1),
        rejections=_int("boundary", "rejections", rejections, minimum=0),
    )


# ===== DocMemo-v0 (envs/docmemo/env.py): pages are 1-based, as in MMLongBench-Doc ===========================
DOCMEMO_KINDS = ("candidates", "selected", "evidence", "feedback", "beliefs")
EVENT_KINDS.update(DOCMEMO_KINDS)


def candidates(
    turn: int,
    round: int,
    query: str,
    lam: float,
    pages: Sequence[int],
    scores: Sequence[float],
    means: Sequence[float],
) -> Event:
    """A round's top-M pages with their scores s, lambda_t, and every page's posterior mean before the draw."""
    shown = _ints("candidates", "pages", pages)
    scored = _floats("candidates", "scores", scores)
    if len(shown) != len(scored):
        raise ValueError(f"candidates event: {len(scored)} scores for {len(shown)} pages")
    return _event(
        "candidates",
        turn,
        round=_int("candidates", "round", round, minimum=0),
        query=_str("candidates", "query", query),
        pages=shown,
        scores=scored,
        means=_floats("candidates", "means", means),
        **{"lambda": _float("candidates", "lambda", lam)},
    )


def selected(turn: int, round: int, pages: Sequence[int], accumulated: Sequence[int]) -> Event:
    """Pages selected this turn and the accumulated set A_t so far, in order."""
    return _event(
        "selected",
        turn,
        round=_int("selected", "round", round, minimum=0),
        pages=_ints("selected", "pages", pages),
        accumulated=_ints("selected", "accumulated", accumulated),
    )


def evidence(
    turn: int, round: int, pages: Sequence[int], means: Sequence[float], new: Sequence[int]
) -> Event:
    """Pages shown as evidence (belief order), their posterior means, and those shown for the first time."""
    shown = _ints("evidence", "pages", pages)
    fresh = _ints("evidence", "new", new)
    if not set(fresh) <= set(shown):
        raise ValueError(f"evidence event: new pages {fresh} are not all among the shown {shown}")
    return _event(
        "evidence", turn, round=_int("evidence", "round", round, minimum=0), pages=shown,
        means=_floats("evidence", "means", means), new=fresh,
    )  # fmt: skip


def feedback(
    turn: int, round: int, query: str, note: str, useful: Sequence[int], irrelevant: Sequence[int]
) -> Event:
    """A refinement: the new query, the note, and the pages marked useful / irrelevant."""
    return _event(
        "feedback",
        turn,
        round=_int("feedback", "round", round, minimum=0),
        query=_str("feedback", "query", query),
        note=_str("feedback", "note", note),
        useful=_ints("feedback", "useful", useful),
        irrelevant=_ints("feedback", "irrelevant", irrelevant),
    )


def beliefs(turn: int, round: int, means: Sequence[float]) -> Event:
    """Every page's posterior mean after a belief update."""
    return _event(
        "beliefs",
        turn,
        round=_int("beliefs", "round", round, minimum=0),
        means=_floats("beliefs", "means", means),
    )


def docmemo_answer(turn: int, text: str, not_answerable: bool, round: int) -> Event:
    """DocMemo's ``answer`` event: the shared fields plus ``not_answerable`` and the round (never forced)."""
    return {
        **answer(turn, text, forced=False),
        "not_answerable": _bool("answer", "not_answerable", not_answerable),
        "round": _int("answer", "round", round, minimum=0),
    }


# ===== MEMORA-v0 (envs/memora/env.py): documents are corpus ids; factors are 1-based, as the policy writes f=k =
MEMORA_KINDS = ("memory_read", "first_stage", "decompose", "subquery", "factor_evidence", "verdict",
                "final_ranking", "memory_write")  # fmt: skip
EVENT_KINDS.update(MEMORA_KINDS)


def memory_read(
    domain: str, num_records: int, similarities: Sequence[float], queries: Sequence[str]
) -> Event:
    """Emitted by ``reset`` (turn -1): the K_m nearest memories shown; ``hits`` (their count) is derived."""
    sims = _floats("memory_read", "similarities", similarities)
    shown = _strs("memory_read", "queries", queries)
    if len(sims) != len(shown):
        raise ValueError(f"memory_read event: {len(sims)} similarities for {len(shown)} queries")
    return _event(
        "memory_read", -1, domain=_str("memory_read", "domain", domain),
        num_records=_int("memory_read", "num_records", num_records, minimum=0),
        hits=len(shown), similarities=sims, queries=shown,
    )  # fmt: skip


def first_stage(query_id: str | None, ranking: Sequence[str], scores: Sequence[float]) -> Event:
    """Emitted by ``reset``: the first stage's top-K_0 (excluded ids removed), best first."""
    docs = _strs("first_stage", "ranking", ranking)
    scored = _floats("first_stage", "scores", scores)
    if len(docs) != len(scored):
        raise ValueError(f"first_stage event: {len(scored)} scores for {len(docs)} documents")
    query = _str("first_stage", "query_id", query_id, optional=True)
    return _event("first_stage", -1, query_id=query, ranking=docs, scores=scored)


def decompose(
    turn: int,
    factors: Sequence[str],
    priorities: Sequence[float],
    used: Sequence[float],
    priors: Sequence[Sequence[int]],
) -> Event:
    """Factors, the policy's priorities, the priorities used after the memory prior, and (h, l) per factor."""
    texts = _strs("decompose", "factors", factors)
    lists = {"priorities": priorities, "used": used, "priors": priors}
    if any(len(v) != len(texts) for v in lists.values()):
        raise ValueError(f"decompose event: every list needs {len(texts)} entries, one per factor")
    return _event(
        "decompose", turn, factors=texts, priorities=_floats("decompose", "priorities", priorities),
        used=_floats("decompose", "used", used),
        priors=[_ints("decompose", f"priors[{i}]", p) for i, p in enumerate(priors)],
    )  # fmt: skip


def subquery(
    turn: int, factor: int, text: str, retrieved: Sequence[str], added: Sequence[str], pool_size: int
) -> Event:
    """A subquery for ``factor``: what it retrieved and which documents joined the pool."""
    got, new = _strs("subquery", "retrieved", retrieved), _strs("subquery", "added", added)
    if not set(new) <= set(got):
        raise ValueError("subquery event: added documents must be among the retrieved ones")
    return _event(
        "subquery", turn, factor=_int("subquery", "factor", factor, minimum=1), text=_str("subquery", "text", text),
        retrieved=got, added=new, pool_size=_int("subquery", "pool_size", pool_size, minimum=0),
    )  # fmt: skip


def factor_evidence(
    turn: int, factor: int, docs: Sequence[str], weights: Sequence[float], snippets: Sequence[str]
) -> Event:
    """Graph edges for ``factor``: documents, normalised weights in [0, 1], snippets."""
    names, ws = _strs("factor_evidence", "docs", docs), _floats("factor_evidence", "weights", weights)
    texts = _strs("factor_evidence", "snippets", snippets)
    if not len(names) == len(ws) == len(texts):
        raise ValueError("factor_evidence event: docs, weights and snippets differ in length")
    if any(not 0.0 <= w <= 1.0 for w in ws):
        raise ValueError(f"factor_evidence event: weights must be in [0, 1], got {ws}")
    factor = _int("factor_evidence", "factor", factor, minimum=1)
    return _event("factor_evidence", turn, factor=factor, docs=names, weights=ws, snippets=texts)


def verdict(turn: int, order: Sequence[str]) -> Event:
    """The judge's listwise verdict, best first."""
    return _event("verdict", turn, order=_strs("verdict", "order", order))


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
    docs, scored = _strs("final_ranking", "ranking", ranking), _floats("final_ranking", "scores", scores)
    if len(docs) != len(scored):
        raise ValueError(f"final_ranking event: {len(scored)} scores for {len(docs)} documents")
    return _event(
        "final_ranking", turn, ranking=docs, scores=scored, k=_int("final_ranking", "k", k, minimum=1),
        forced=_bool("final_ranking", "forced", forced), margin=_float("final_ranking", "margin", margin),
        support=_float("final_ranking", "support", support),
    )  # fmt: skip


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
    return _event(
        kind, turn, domain=_str(kind, "domain", domain), written=_bool(kind, "written", written),
        reason=_str(kind, "reason", reason), ndcg=None if ndcg is None else _float(kind, "ndcg", ndcg),
        first_stage_ndcg=None if first_stage_ndcg is None else _float(kind, "first_stage_ndcg", first_stage_ndcg),
        outcomes=_strs(kind, "outcomes", outcomes),
    )  # fmt: skip


# ===== R3G-v0 (envs/r3g/env.py): images are corpus ids; candidates are 1-based, as the policy writes [i] ======
R3G_KINDS = ("r3g_task", "plan", "coarse_retrieval", "judge_error", "evidence_selected")
EVENT_KINDS.update(R3G_KINDS)


def r3g_task(
    gold_images: Sequence[str],
    scenario: str,
    pool_size: int,
    top_k: int,
    rerank: str,
    use_plan: bool,
    pool_source: str = "corpus",
    judge_guidelines: bool = True,
) -> Event:
    """Emitted by ``reset`` (turn -1): the gold evidence and the switches (P, k, rerank mode, plan, where the pool
    comes from, judge guidelines) it runs with, so a report can tell MRAG from an ablation."""
    if rerank not in ("fused", "stage1", "stage2", "none"):
        raise ValueError(f"r3g_task event: rerank must be fused, stage1, stage2 or none, got {rerank!r}")
    if pool_source not in ("corpus", "benchmark"):
        raise ValueError(f"r3g_task event: pool_source must be corpus or benchmark, got {pool_source!r}")
    return _event(
        "r3g_task", -1, gold_images=_strs("r3g_task", "gold_images", gold_images),
        scenario=_str("r3g_task", "scenario", scenario), pool_size=_int("r3g_task", "pool_size", pool_size, 1),
        top_k=_int("r3g_task", "top_k", top_k, 1), rerank=rerank, use_plan=_bool("r3g_task", "use_plan", use_plan),
        pool_source=pool_source, judge_guidelines=_bool("r3g_task", "judge_guidelines", judge_guidelines),
    )  # fmt: skip


def plan(turn: int, text: str) -> Event:
    """The policy's plan of visual cues, written before any evidence."""
    return _event("plan", turn, text=_str("plan", "text", text))


def coarse_retrieval(
    turn: int,
    pool: Sequence[str],
    similarities: Sequence[float],
    stage1: Sequence[float],
    gold_images: Sequence[str],
) -> Event:
    """The top-P pool (Stage-1 order) with cosine similarities and Stage-1 scores; ``gold_in_pool`` is derived."""
    ids = _strs("coarse_retrieval", "pool", pool)
    sims, s1 = (
        _floats("coarse_retrieval", "similarities", similarities),
        _floats("coarse_retrieval", "stage1", stage1),
    )
    if not len(ids) == len(sims) == len(s1):
        raise ValueError(
            f"coarse_retrieval event: {len(ids)} ids, {len(sims)} similarities, {len(s1)} scores"
        )
    gold = set(_strs("coarse_retrieval", "gold_images", gold_images))
    return _event(
        "coarse_retrieval", turn, pool=ids, similarities=sims, stage1=s1, gold_in_pool=bool(gold & set(ids))
    )


def judge_error(turn: int, candidate: int | None, reason: str) -> Event:
    """One pooled candidate (or one judge line naming none: ``candidate`` None) without usable scores."""
    number = None if candidate is None else _int("judge_error", "candidate", candidate)
    return _event("judge_error", turn, candidate=number, reason=_str("judge_error", "reason", reason))


def evidence_selected(
    turn: int,
    pool: Sequence[str],
    stage1: Sequence[float],
    stage2: Sequence[float | None],
    final: Sequence[float],
    selected_positions: Sequence[int],
    gold_images: Sequence[str],
    rerank: str,
) -> Event:
    """The pool's final ranking and the top-k evidence; ``ranking`` (ties keep pool order) and ``selected``
    are derived. ``stage2`` is None for a candidate without usable judge scores (all None under Stage-1 only)."""
    kind = "evidence_selected"
    ids, s1, fin = _strs(kind, "pool", pool), _floats(kind, "stage1", stage1), _floats(kind, "final", final)
    s2 = [
        None if s is None else _float(kind, f"stage2[{i}]", s)
        for i, s in enumerate(_seq(kind, "stage2", stage2))
    ]
    if not len(ids) == len(s1) == len(s2) == len(fin):
        raise ValueError(f"{kind} event: pool, stage1, stage2 and final differ in length")
    positions = _ints(kind, "selected_positions", selected_positions)
    if any(not 0 <= p < len(ids) for p in positions):
        raise ValueError(f"{kind} event: selected positions {positions} outside a pool of {len(ids)}")
    order = sorted(range(len(ids)), key=lambda i: (-fin[i], i))
    return _event(
        kind, turn, pool=ids, stage1=s1, stage2=s2, final=fin, ranking=[ids[i] for i in order],
        selected=[ids[p] for p in positions], gold_images=_strs(kind, "gold_images", gold_images),
        rerank=_str(kind, "rerank", rerank),
    )  # fmt: skip
