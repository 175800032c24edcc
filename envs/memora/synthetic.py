"""A synthetic reasoning-retrieval domain for MEMORA-v0's CPU tests and the memory demo.

Every query names its topic (made-up topic words) and particulars of its own (``NUM_PARTICULARS`` made-up words
no other query or document has), but not the facet it is really about; each topic has a preferred facet (drawn
once per domain) that most of its queries ask about. The particulars make two queries of a topic two questions,
not one question's words permuted (which the memory's own-query rule would rightly hide from each other; until
issue 46 the queries had none). Relevant documents are the
documents of (topic, facet); the topic's other facets give look-alike distractors that share every topic
word, so a lexical first stage ranks relevant and distractor documents alike. Which facet matters is
learnable only from experience in the domain: exactly what episodic factor memory stores.

The facet lexicon (``SyntheticDomain.facets``) is public domain knowledge, what an LLM would know; the
preferred facets and qrels are hidden (qrels travel only as ground truth and to the memory's outcome).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FACETS = (
    "cost price budget",
    "safety hazard risk",
    "history origin era",
    "mechanism cause process",
    "measurement scale unit",
    "regulation law permit",
)
"""Facet phrases; every document of a facet carries its words."""

_FILLER = "the a of and in to with for on about this that some often many".split()
_SYLLABLES = ("ka", "lo", "mi", "ru", "te", "vo", "zan", "qui", "bre", "sol", "dri", "mor")
NUM_PARTICULARS = 4
"""Particular words per query: its content words are then the topic's three, "matter" and these four, so two
queries of a topic have a content-word cosine of 4 / 8 = 0.5 ("often" / "many" fillers aside), below
``ragym.envs.memora.memory.OWN_QUERY_SIMILARITY``."""


@dataclass(frozen=True)
class SyntheticConfig:
    """Size and difficulty of the synthetic domain."""

    num_topics: int = 12
    """Topics; each has three made-up topic words."""
    docs_per_facet: int = 3
    """Relevant documents of one (topic, facet) pair."""
    noise_docs_per_topic: int = 6
    """Documents with topic words and no facet words."""
    num_queries: int = 160
    """Queries in the stream."""
    preferred_share: float = 0.85
    """Share of a topic's queries that ask about its preferred facet (others: a uniformly drawn facet)."""
    seed: int = 0
    """Generator seed."""


@dataclass
class SyntheticDomain:
    """Corpus, query stream and qrels of one domain."""

    name: str
    corpus: dict[str, str]
    queries: list[dict] = field(default_factory=list)
    """Each: ``{"id", "query", "qrels": {docid: 1}, "excluded_ids": []}``, in stream order."""
    facets: tuple[str, ...] = FACETS


def _word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(_SYLLABLES, size=3))


def _sentence(rng: np.random.Generator, words: list[str], num_filler: int) -> str:
    tokens = [*words, *rng.choice(_FILLER, size=num_filler)]
    return " ".join(rng.permutation(tokens))


def _particulars(seed: int, num_queries: int) -> list[list[str]]:
    """``NUM_PARTICULARS`` distinct words per query, each "x" and three syllables (no topic word starts with x),
    drawn from their own generator so that topics, facets and qrels are the same as without them."""
    rng = np.random.default_rng([seed, 46])
    n = len(_SYLLABLES)
    picks = rng.choice(n**3, size=num_queries * NUM_PARTICULARS, replace=False)
    words = ["x" + "".join(_SYLLABLES[p // n**i % n] for i in range(3)) for p in picks]
    return [words[q * NUM_PARTICULARS : (q + 1) * NUM_PARTICULARS] for q in range(num_queries)]


def synthetic_domain(config: SyntheticConfig = SyntheticConfig(), name: str = "synthetic") -> SyntheticDomain:
    """Build the domain deterministically from ``config.seed``."""
    rng = np.random.default_rng(config.seed)
    particulars = _particulars(config.seed, config.num_queries)
    topics = [[_word(rng) for _ in range(3)] for _ in range(config.num_topics)]
    preferred = rng.integers(len(FACETS), size=config.num_topics)
    corpus: dict[str, str] = {}
    for t, words in enumerate(topics):
        for f, facet in enumerate(FACETS):
            for i in range(config.docs_per_facet):
                corpus[f"{name}/t{t}_f{f}_{i}.txt"] = _sentence(rng, [*words[:2], *facet.split()[:2]], 6)
        for i in range(config.noise_docs_per_topic):
            corpus[f"{name}/t{t}_noise_{i}.txt"] = _sentence(rng, words, 6)
    domain = SyntheticDomain(name, corpus)
    for q in range(config.num_queries):
        t = int(rng.integers(config.num_topics))
        f = int(preferred[t]) if rng.random() < config.preferred_share else int(rng.integers(len(FACETS)))
        qrels = {f"{name}/t{t}_f{f}_{i}.txt": 1 for i in range(config.docs_per_facet)}
        text = "why does " + _sentence(rng, list(topics[t]), 3) + " matter here " + " ".join(particulars[q])
        domain.queries.append({"id": f"{name}-{q}", "query": text, "qrels": qrels, "excluded_ids": []})
    return domain
