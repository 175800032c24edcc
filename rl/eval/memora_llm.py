"""``OpenAIChatModel``: MEMORA's LLM calls on an OpenAI-compatible endpoint, cached and retried.

Every call asks for a JSON object (decompose: ``{"factors": [{"text", "priority"}]}``; subquery:
``{"subquery": "..."}``; extract: ``{"evidence": [{"doc", "score", "snippet"}]}``; judge: ``{"order":
[numbers]}``). The judge's prompt carries the factor evidence graph (each candidate's per-factor score and
snippet) and the memory summary, as section 3.11 describes. An answer that is not
such an object counts as a failure and is retried like a timeout or a 5xx; after ``max_retries`` the call
raises ``LLMError`` naming the endpoint and the last problem. Answers are cached by the SHA-256 of the
request body, in memory and, with ``cache_path``, in a JSON-lines file that later runs reuse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ragym.rl.eval.memora_models import LLMConfig, LLMError

logger = logging.getLogger(__name__)
T = TypeVar("T")

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}

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


class OpenAIChatModel:
    """The committee's calls as chat completions with a JSON answer each."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.cache: dict[str, str] = {}
        self.num_requests = 0
        path = Path(config.cache_path) if config.cache_path else None
        if path is not None and path.exists():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    row = json.loads(line)
                    self.cache[row["key"]] = row["content"]
                except (ValueError, KeyError, TypeError) as err:
                    raise ValueError(f"{path}:{number}: bad cache line: {err}") from err
        self._cache_path = path

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
        """One parsed JSON answer: from the cache, or from the endpoint with retries (bad shapes are retried)."""
        body = {
            "model": self.config.model,
            "temperature": temperature,
            "messages": [{"role": "user", "content": prompt}],
            "response_format": {"type": "json_object"},
        }
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if key in self.cache:
            return parse(json.loads(self.cache[key]))
        problem = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                time.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            try:
                content = self._post(body)
                answer = json.loads(content)
                if not isinstance(answer, dict):
                    raise ValueError("the answer is not a JSON object")
                result = parse(answer)
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                ValueError,
                KeyError,
                TypeError,
            ) as err:
                problem = f"{type(err).__name__}: {err}"
                logger.warning(
                    "LLM call to %s failed (attempt %d): %s", self.config.base_url, attempt + 1, problem
                )
                continue
            self._store(key, content)
            return result
        raise LLMError(
            f"{self.config.base_url}: no usable answer after {self.config.max_retries + 1} attempts ({problem})"
        )

    def _post(self, body: dict[str, Any]) -> str:
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        request = urllib.request.Request(
            self.config.base_url.rstrip("/") + "/chat/completions",
            json.dumps(body).encode(),
            headers,
            method="POST",
        )
        self.num_requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                return json.loads(response.read())["choices"][0]["message"]["content"]
        except urllib.error.HTTPError as err:
            if err.code in _RETRY_STATUS:
                raise ConnectionError(f"HTTP {err.code}") from err
            raise LLMError(f"{self.config.base_url}: HTTP {err.code} {err.reason}") from err

    def _store(self, key: str, content: str) -> None:
        self.cache[key] = content
        if self._cache_path is not None:
            self._cache_path.parent.mkdir(parents=True, exist_ok=True)
            with self._cache_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "content": content}) + "\n")


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
