"""The models behind MEMORA's fixed pipeline (``ragym.envs.memora.pipeline``): the calls they answer and an
offline scripted model.

A model answers the calls the paper makes to GPT-4o: factor decomposition (with the memory summary), a subquery
for one factor (section 3.6), evidence extraction for one factor over a batch of candidates, and the listwise
meta-verdict judge, which receives the factor evidence graph and the memory summary (section 3.11). The
scripted model here is lexical and deterministic (tests, the CPU demo, ``ragym budget``'s longest episode); the
LLM, ``ragym.rl.eval.memora_llm.OpenAIChatModel``, posts chat completions through the shared client
(``ragym.data_prep.chat``: disk cache, retries).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from ragym.envs.memora.memory import bag_of_words, cosine

STOPWORDS = frozenset(
    "the a an of and in to with for on about this that some often many why does do is are what how matter here".split()
)
GENERIC_FACETS = (
    "underlying mechanism",
    "definition and theory",
    "practical example",
    "measurement and data",
)
"""Facets the scripted model proposes when the caller gives none."""


def content_words(text: str) -> list[str]:
    """Lower-cased tokens of ``text`` that are not stopwords, in order, without repeats."""
    return list(dict.fromkeys(t for t in bag_of_words(text) if t not in STOPWORDS))


class CommitteeModel(Protocol):
    """The pipeline's LLM calls; each method call is one LLM request."""

    def decompose(
        self, query: str, memories: list[dict[str, Any]], num_factors: int
    ) -> list[tuple[str, float]]:
        """Intent factors with priorities."""
        ...

    def subquery(self, query: str, factor: str, previous: list[str]) -> str:
        """A search query for ``factor``, different from the ``previous`` ones issued for it."""
        ...

    def extract(
        self, query: str, factor: str, candidates: list[dict[str, Any]]
    ) -> list[tuple[int, float, str]]:
        """(candidate number, score 0-10, snippet) for the candidates that bear on ``factor``."""
        ...

    def judge(
        self,
        query: str,
        factors: list[dict[str, Any]],
        candidates: list[dict[str, Any]],
        evidence: list[dict[str, Any]],
        memories: list[dict[str, Any]],
    ) -> list[int]:
        """Candidate numbers, best first, from the candidates, their factor evidence edges and the memories."""
        ...


@dataclass(frozen=True)
class ScriptedModel:
    """Lexical stand-in for the LLM: factor 1 is the query's content, the others facets from a lexicon."""

    facets: tuple[str, ...] = GENERIC_FACETS
    """Facet phrases to choose the remaining factors from."""
    use_memory: bool = True
    """Rank facets by how they fared in the shown memories (the memory summary routed to decomposition)."""
    factor_match: float = 0.5
    """Cosine at which a memory factor counts as the same facet."""

    def decompose(
        self, query: str, memories: list[dict[str, Any]], num_factors: int
    ) -> list[tuple[str, float]]:
        """The query's content words, then the facets with the best memory record (hash order without one)."""

        def key(facet: str) -> tuple[float, str]:
            tiebreak = hashlib.sha256((query + facet).encode()).hexdigest()
            return (-self._facet_record(facet, memories), tiebreak)

        chosen = sorted(self.facets, key=key)[: num_factors - 1]
        records = [self._facet_record(f, memories) for f in chosen]
        return [(" ".join(content_words(query)), 1.0)] + [
            (f, max(0.1, 1.0 + r)) for f, r in zip(chosen, records, strict=True)
        ]

    def _facet_record(self, facet: str, memories: list[dict[str, Any]]) -> float:
        """Similarity-weighted (helped - hurt) of matching memory factors; 0 without memory."""
        if not self.use_memory:
            return 0.0
        bag, total = bag_of_words(facet), 0.0
        for memory in memories:
            for f in memory["factors"]:
                if cosine(bag, bag_of_words(f["text"])) >= self.factor_match:
                    total += memory["similarity"] * {"helped": 1.0, "hurt": -1.0}.get(f["outcome"], 0.0)
        return total

    def subquery(self, query: str, factor: str, previous: list[str]) -> str:
        """The query's and the factor's content words; a repeat, the factor then the raw query."""
        if previous:
            return f"{factor} {query}"
        return " ".join(dict.fromkeys(content_words(query) + content_words(factor)))

    def extract(
        self, query: str, factor: str, candidates: list[dict[str, Any]]
    ) -> list[tuple[int, float, str]]:
        """Score = 10 x the share of the factor's content words found in the document."""
        words = content_words(factor)
        out = []
        for c in candidates:
            found = [w for w in words if w in bag_of_words(c["text"])]
            out.append((c["number"], round(10.0 * len(found) / max(len(words), 1), 3), " ".join(found)))
        return out

    def judge(
        self,
        query: str,
        factors: list[dict[str, Any]],
        candidates: list[dict[str, Any]],
        evidence: list[dict[str, Any]],
        memories: list[dict[str, Any]],
    ) -> list[int]:
        """Candidates by priority-weighted evidence in the graph, then by how well past episodes that ranked
        them fared (the memory summary), then by their current order; the raw text is not read."""
        priority = {k: f["priority"] for k, f in enumerate(factors, 1)}
        support: dict[int, float] = {}
        for edge in evidence:
            support[edge["number"]] = support.get(edge["number"], 0.0) + priority.get(
                edge["factor"], 0.0
            ) * float(edge["weight"])
        recalled: dict[str, float] = {}
        for memory in memories:
            for docid in memory["top_docs"]:
                recalled[docid] = recalled.get(docid, 0.0) + memory["ndcg"]

        def key(ic: tuple[int, dict[str, Any]]) -> tuple[float, float, int]:
            i, c = ic
            return (-support.get(c["number"], 0.0), -recalled.get(c["docid"], 0.0), i)

        return [c["number"] for _, c in sorted(enumerate(candidates), key=key)]
