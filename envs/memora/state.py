"""MEMORA-v0 episode state: the candidate pool, factors, evidence graph, verdict, budgets and scoring.

Pool documents keep the number they were shown with (1-based, in the order they joined the pool), so a
candidate's number never changes within an episode.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ragym.envs.memora.actions import Action, Decompose, Extract, Judge, Stop
from ragym.envs.memora.corpus import Collection
from ragym.envs.memora.memory import EpisodicMemory, FactorOutcome, MemoryRecord, document_prior, factor_prior
from ragym.envs.memora.scoring import (
    EvidenceGraph,
    ScoreWeights,
    adjusted_priorities,
    controller_signals,
    coverage_of,
    document_scores,
    final_order,
    judge_scores,
    rank_scores,
)
from ragym.envs.retrieval.ranking import ndcg_at_k


@dataclass
class EpisodeState:
    """Everything one MEMORA episode accumulates; ``config`` is the env's ``MemoraConfig``."""

    config: Any
    query: str
    query_id: str | None
    domain: str
    memory: EpisodicMemory
    collection: Collection
    qrels: dict[str, int] | None
    excluded: set[str]
    pool: list[str]
    ranks: list[int]
    first_scores: list[float]
    memories: list[tuple[MemoryRecord, float]]
    doc_prior: dict[str, float]
    image_description: str | None = None
    factors: list[tuple[str, float]] = field(default_factory=list)
    priors: list[tuple[int, int]] = field(default_factory=list)
    priorities: np.ndarray = field(default_factory=lambda: np.zeros(0))
    graph: EvidenceGraph = field(default_factory=EvidenceGraph)
    verdict: list[int] = field(default_factory=list)
    calls: Counter = field(default_factory=Counter)

    @classmethod
    def start(
        cls, config: Any, opts: dict[str, Any], domain: str, memory: EpisodicMemory, collection: Collection
    ) -> EpisodeState:
        """First-stage candidates (precomputed or retrieved), excluded ids removed, and the memory read."""
        excluded = {str(d) for d in opts.get("excluded_ids") or []}
        if opts.get("first_stage") is not None:
            run = [(str(d), float(s)) for d, s in opts["first_stage"]]
        else:
            text = opts["query"]
            if config.describe_in_first_stage and opts.get("image_description"):
                text = f"{text} {opts['image_description']}"  # section 3.3: R consumes t and (a description of) x
            hits = collection.retriever.search(text, config.k0 + len(excluded))
            run = [(h.docid, h.score) for h in hits]
        run = [(d, s) for d, s in run if d not in excluded][: config.k0]
        missing = [d for d, _ in run if d not in collection.texts]
        if missing:
            raise ValueError(f"MEMORA first-stage documents not in the collection: {missing[:3]}")
        repeated = [d for d, n in Counter(d for d, _ in run).items() if n > 1]
        if repeated:  # one document under two candidate numbers, twice in the final ranking
            raise ValueError(f"MEMORA first stage ranks documents more than once: {repeated[:3]}")
        query_id = None if opts.get("query_id") is None else str(opts["query_id"])
        # Never the query's own episodes; one per other query.
        memories = memory.nearest(opts["query"], config.k_m, query_id, config.own_query_similarity)
        qrels = opts.get("qrels")
        return cls(
            config=config,
            query=opts["query"],
            query_id=query_id,
            domain=domain,
            memory=memory,
            collection=collection,
            qrels={str(d): int(r) for d, r in qrels.items()} if qrels is not None else None,
            excluded=excluded,
            pool=[d for d, _ in run],
            ranks=list(range(len(run))),
            first_scores=[s for _, s in run],
            memories=memories,
            doc_prior=document_prior(memories),
            image_description=opts.get("image_description"),
        )

    @property
    def budgets(self) -> dict[str, int]:
        """Calls allowed per action kind."""
        c = self.config
        return {
            "decompose": c.max_decompose,
            "subquery": c.max_subqueries,
            "extract": c.max_extracts,
            "judge": c.max_judges,
        }

    @property
    def memory_hits(self) -> int:
        """Memories retrieved for this query (similarity > 0)."""
        return len(self.memories)

    def violation(self, action: Action) -> tuple[str, str] | None:
        """Why a well-formed action is not allowed now (reason, detail), or None."""
        if isinstance(action, Stop):
            return None
        kind = type(action).__name__.lower()
        if self.calls[kind] >= self.budgets[kind]:
            return "budget_exhausted", kind
        if isinstance(action, Decompose):
            n = len(action.factors)
            ok = self.config.k_min <= n <= self.config.k_max
            return (
                None
                if ok
                else ("factor_count", f"{n} factors, need {self.config.k_min}..{self.config.k_max}")
            )
        if isinstance(action, Judge):
            return self._bad_numbers(action.order)
        if not self.factors:
            return "no_factors", "decompose first"
        if not 1 <= action.factor <= len(self.factors):
            return "bad_factor", f"f={action.factor} of {len(self.factors)}"
        if isinstance(action, Extract):
            numbers = [d for d, _, _ in action.evidence]
            if any(not 0 <= s <= self.config.evidence_scale for _, s, _ in action.evidence):
                return "bad_score", f"scores must be in [0, {self.config.evidence_scale}]"
            return self._bad_numbers(numbers)
        return None

    def _bad_numbers(self, numbers: Sequence[int]) -> tuple[str, str] | None:
        """A candidate named twice (a verdict or evidence of one place per candidate), or a number past the pool."""
        if len(set(numbers)) != len(numbers):
            return "duplicate_candidate", str(list(numbers))
        bad = [n for n in numbers if not 1 <= n <= len(self.pool)]
        return ("bad_candidate", str(bad[:5])) if bad else None

    def decompose(self, factors: Sequence[tuple[str, float]]) -> None:
        """Set the factors; the memory factor prior reweights their priorities; the graph starts empty."""
        self.calls["decompose"] += 1
        self.factors = list(factors)
        self.priors = [factor_prior(text, self.memories, self.config.factor_match) for text, _ in factors]
        gamma = self.config.factor_prior_gamma
        self.priorities = adjusted_priorities([p for _, p in factors], self.priors, gamma)
        self.graph, self.verdict = EvidenceGraph(), []

    def subquery(self, text: str) -> tuple[list[str], list[str]]:
        """Retrieve ``subquery_k`` documents; new ones join the pool with their subquery rank."""
        self.calls["subquery"] += 1
        hits = self.collection.retriever.search(text, self.config.subquery_k + len(self.excluded))
        retrieved = [h.docid for h in hits if h.docid not in self.excluded][: self.config.subquery_k]
        added = []
        for rank, docid in enumerate(retrieved):
            if docid not in self.pool and len(self.pool) < self.config.max_pool:
                self.pool.append(docid)
                self.ranks.append(rank)
                added.append(docid)
        return retrieved, added

    def extract(
        self, factor: int, evidence: Sequence[tuple[int, float, str]]
    ) -> tuple[list[str], list[float], list[str]]:
        """Add graph edges for ``factor`` (0-based); returns (documents, weights, snippets) for the event."""
        self.calls["extract"] += 1
        docs, weights, snippets = [], [], []
        for number, score, snippet in evidence:
            weight = score / self.config.evidence_scale
            self.graph.add(number - 1, factor, weight, snippet)
            docs.append(self.pool[number - 1])
            weights.append(weight)
            snippets.append(snippet)
        return docs, weights, snippets

    def judge(self, order: Sequence[int]) -> None:
        """Record the latest listwise verdict (pool indices, best first)."""
        self.calls["judge"] += 1
        self.verdict = list(order)

    def scores(self) -> np.ndarray:
        """S_j of every pool document."""
        n, w = (
            len(self.pool),
            ScoreWeights(**{f: getattr(self.config, f) for f in ScoreWeights.__dataclass_fields__}),
        )
        memory = np.array([self.doc_prior.get(d, 0.0) for d in self.pool])  # (D,)
        retrieval = rank_scores(self.ranks, self.config.k0)
        return document_scores(
            self.graph, self.priorities, judge_scores(self.verdict, n), retrieval, memory, w
        )

    def final_ranking(self) -> tuple[list[str], list[float]]:
        """The whole pool in final order with its scores."""
        scores = self.scores()
        order = final_order(scores, self.ranks)
        return [self.pool[j] for j in order], [round(float(scores[j]), 6) for j in order]

    def signals(self) -> dict[str, float]:
        """The controller's margin and support on the current scores."""
        scores = self.scores()
        coverage = coverage_of(self.graph, len(self.pool), len(self.factors), self.config.coverage_threshold)
        return controller_signals(scores, final_order(scores, self.ranks), coverage, self.config.k)

    def top_rows(self) -> list[tuple[int, str, float, str]]:
        """The top K_c candidates as (number, docid, score, text)."""
        scores = self.scores()
        order = final_order(scores, self.ranks)[: self.config.kc]
        return [(j + 1, self.pool[j], float(scores[j]), self.collection.texts[self.pool[j]]) for j in order]

    def memory_record(self, ranking: list[str]) -> tuple[bool, str, MemoryRecord | None]:
        """The episode as a memory record, factors judged against the qrels: (writable, reason, record)."""
        if self.qrels is None:
            return False, "no_qrels", None
        k = self.config.k
        run = {"q": {d: float(k - i) for i, d in enumerate(ranking[:k])}}
        ndcg = ndcg_at_k(run, {"q": self.qrels}, k=k)["q"]
        a = self.graph.matrix(len(self.pool), len(self.factors))  # (D, F)
        outcomes = []
        for f, ((text, _), used) in enumerate(zip(self.factors, self.priorities, strict=True)):
            supported = [self.pool[j] for j in np.flatnonzero(a[:, f] >= self.config.coverage_threshold)]
            relevant = any(self.qrels.get(d, 0) > 0 for d in supported)
            outcome = "helped" if relevant else ("hurt" if supported else "neutral")
            outcomes.append(FactorOutcome(text, round(float(used), 4), outcome))
        record = MemoryRecord(self.query, tuple(outcomes), tuple(ranking[:k]), round(ndcg, 6), self.query_id)
        return True, "written", record

    def first_stage_ndcg(self) -> float | None:
        """nDCG@K of the first stage's ranking (None without qrels)."""
        if self.qrels is None:
            return None
        k, first = self.config.k, self.pool[: len(self.first_scores)]
        run = {"q": {d: float(k - i) for i, d in enumerate(first[:k])}}
        return ndcg_at_k(run, {"q": self.qrels}, k=k)["q"]

    def view(self) -> dict[str, Any]:
        """What the observation shows, as data (for scripted pipelines), plus the whole pool and the evidence
        graph a pipeline's extraction and judge consult."""
        return {
            "query": self.query,
            "image_description": self.image_description,
            "factors": [
                {"text": t, "priority": float(p)}
                for (t, _), p in zip(self.factors, self.priorities, strict=True)
            ],
            "candidates": [
                {"number": n, "docid": d, "score": s, "text": t} for n, d, s, t in self.top_rows()
            ],
            "pool": [
                {"number": j + 1, "docid": d, "text": self.collection.texts[d]}
                for j, d in enumerate(self.pool)
            ],
            "evidence": [
                {"number": j + 1, "factor": k + 1, "weight": w, "snippet": snippet}
                for (j, k), (w, snippet) in sorted(self.graph.edges.items())
            ],
            "memories": [{**asdict(r), "similarity": sim} for r, sim in self.memories],
            "signals": self.signals(),
            "calls_left": {kind: n - self.calls[kind] for kind, n in self.budgets.items()},
            "pool_size": len(self.pool),
        }
