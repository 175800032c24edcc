"""``OpenAIChatModel``: MEMORA's LLM calls through the shared chat client (``ragym.data_prep.chat``), configured by
``LLMConfig`` (the pipeline and the scripted model: ``ragym.envs.memora.pipeline``, ``ragym.envs.memora.models``).

Every call asks for a JSON object (decompose: ``{"factors": [{"text", "priority"}]}``; subquery:
``{"subquery": "..."}``; extract: ``{"evidence": [{"doc", "score", "snippet"}]}``; judge: ``{"order":
[numbers]}``). The judge's prompt carries the factor evidence graph (each candidate's per-factor score and
snippet) and the memory summary, as section 3.11 describes. An answer that is not
such an object counts as a failure and is retried like a timeout or a 5xx; after ``max_retries`` the call
raises ``ChatError`` naming the endpoint and the last problem. Answers are cached as the client caches them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ragym.data_prep.chat import ChatClient, ChatConfig

logger = logging.getLogger(__name__)
T = TypeVar("T")


DECOMPOSE_PROMPT = """Decompose the retrieval query into {n} intent factors with priorities (summing to 1).
Past episodes of this domain (factors marked helped/hurt) may show which factors matter.
Query: {query}
Memory: {memory}
Answer with JSON: {{"factors": [{{"text": "...", "priority": 0.4}}, ...]}}"""

SUBQUERY_PROMPT = """Write one search-engine query that retrieves documents satisfying the intent factor below.
Query: {query}
Factor: {factor}
Queries already issued for this factor (write a different one): {previous}
Answer with JSON: {{"subquery": "..."}}"""

EXTRACT_PROMPT = """For the intent factor below, score how well each candidate document satisfies it (0-10) and quote
the supporting snippet (empty when none).
Query: {query}
Factor: {factor}
Candidates:
{candidates}
Answer with JSON: {{"evidence": [{{"doc": 1, "score": 7, "snippet": "..."}}, ...]}}"""

JUDGE_PROMPT = """Rank the candidates for the query, best first. Ground the ranking in the factor evidence graph
(each candidate's score per factor, 0-1, with its snippet) and in the memory of past episodes of this domain,
not in the raw documents alone.
Query: {query}
Factors: {factors}
Memory: {memory}
Candidates with their factor evidence:
{candidates}
Answer with JSON: {{"order": [3, 1, 2]}}"""


def _candidates_text(candidates: list[dict[str, Any]], chars: int = 400) -> str:
    return "\n".join(f"[{c['number']}] {c['text'][:chars]}" for c in candidates)


def memory_summary(memories: list[dict[str, Any]]) -> str:
    """The shown memories in one line each: query, nDCG, and each factor with its outcome."""
    lines = [
        f"{m['query'][:80]!r} (nDCG {m['ndcg']:.2f}): "
        + ", ".join(f"{f['text']} {f['outcome']}" for f in m["factors"])
        for m in memories
    ]
    return "; ".join(lines) or "none"


def graph_text(candidates: list[dict[str, Any]], evidence: list[dict[str, Any]], chars: int = 400) -> str:
    """Each candidate's text, then its evidence edges ``f<k> <weight> "<snippet>"`` (``none`` without one)."""
    edges: dict[int, list[str]] = {}
    for e in evidence:
        edges.setdefault(e["number"], []).append(f"f{e['factor']} {e['weight']:.2f} {e['snippet']!r}")
    return "\n".join(
        f"[{c['number']}] {c['text'][:chars]}\n    evidence: {'; '.join(edges.get(c['number'], [])) or 'none'}"
        for c in candidates
    )


@dataclass(frozen=True)
class LLMConfig:
    """The endpoint (``ChatConfig``: URL, model, key, cache, retries) and the temperature of each call kind."""

    chat: ChatConfig = ChatConfig(model="gpt-4o", max_retries=3)
    """Where and how patiently to call the chat endpoint (the paper's model: GPT-4o)."""
    extract_temperature: float = 0.2
    """Temperature of evidence extraction (the paper: 0.2)."""
    judge_temperature: float = 0.0
    """Temperature of the judge (the paper: 0.0)."""
    plan_temperature: float = 0.0
    """Temperature of decomposition and subquery writing (the paper gives none; ragym: 0.0, like the judge)."""


class OpenAIChatModel:
    """The committee's calls as chat completions with a JSON answer each."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.client = ChatClient(config.chat)

    def decompose(
        self, query: str, memories: list[dict[str, Any]], num_factors: int
    ) -> list[tuple[str, float]]:
        """Factors with priorities from the LLM."""
        prompt = DECOMPOSE_PROMPT.format(n=num_factors, query=query, memory=memory_summary(memories))
        return self._call(
            prompt,
            self.config.plan_temperature,
            lambda a: [(str(f["text"]), float(f["priority"])) for f in _list(a, "factors")],
        )

    def subquery(self, query: str, factor: str, previous: list[str]) -> str:
        """The LLM's search query for one factor."""
        prompt = SUBQUERY_PROMPT.format(query=query, factor=factor, previous="; ".join(previous) or "none")
        return self._call(prompt, self.config.plan_temperature, lambda a: _text(a, "subquery"))

    def extract(
        self, query: str, factor: str, candidates: list[dict[str, Any]]
    ) -> list[tuple[int, float, str]]:
        """Evidence triples from the LLM."""
        prompt = EXTRACT_PROMPT.format(query=query, factor=factor, candidates=_candidates_text(candidates))
        return self._call(
            prompt,
            self.config.extract_temperature,
            lambda a: [
                (int(e["doc"]), float(e["score"]), str(e.get("snippet", ""))) for e in _list(a, "evidence")
            ],
        )

    def judge(
        self,
        query: str,
        factors: list[dict[str, Any]],
        candidates: list[dict[str, Any]],
        evidence: list[dict[str, Any]],
        memories: list[dict[str, Any]],
    ) -> list[int]:
        """The listwise order from the LLM, given the evidence graph and the memory summary."""
        names = "; ".join(f"f{k} {f['text']} ({f['priority']:.2f})" for k, f in enumerate(factors, 1))
        prompt = JUDGE_PROMPT.format(
            query=query,
            factors=names,
            memory=memory_summary(memories),
            candidates=graph_text(candidates, evidence),
        )
        return self._call(
            prompt, self.config.judge_temperature, lambda a: [int(n) for n in _list(a, "order")]
        )

    def _call(self, prompt: str, temperature: float, parse: Callable[[dict[str, Any]], T]) -> T:
        """One parsed JSON answer (a reply that is not such an object, or lacks what ``parse`` reads, is retried)."""
        messages = [{"role": "user", "content": prompt}]
        return self.client.complete(
            messages, temperature=temperature, json_object=True, parse=lambda text: parse(_object(text))
        )


def _object(text: str) -> dict[str, Any]:
    answer = json.loads(text)
    if not isinstance(answer, dict):
        raise ValueError("the answer is not a JSON object")
    return answer


def _text(answer: dict[str, Any], key: str) -> str:
    value = answer.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"the answer lacks a non-empty string {key!r}: {json.dumps(answer)[:200]}")
    return value.strip()


def _list(answer: dict[str, Any], key: str) -> list[Any]:
    value = answer.get(key)
    if not isinstance(value, list):
        raise ValueError(f"the answer lacks a list {key!r}: {json.dumps(answer)[:200]}")
    return value
