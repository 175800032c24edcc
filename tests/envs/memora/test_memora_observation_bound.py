"""MEMORA-v0 observations within ``max_obs_chars``: over the bound, the candidates' texts are shortened evenly
(each ending "… [cut]") so that the query, every candidate's number and id, the signals and the budgets stay;
the cut is an ``observation_cut`` event; a view that fits reads exactly as before."""

from __future__ import annotations

import re

import pytest

from ragym.envs.events import events_of
from ragym.envs.memora.env import MemoraEnv
from ragym.envs.retrieval.hits import Hit, NamedRetrievers
from tests.envs.fakes import write_corpus
from tests.envs.memora.test_memora import OPTIONS, small_env, turn

CUT = "… [cut]"
NUM_DOCS = 50


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """50 BRIGHT-like documents of 3,000 characters under path-like ids."""
    texts = {f"stackexchange/biology/doc_{i:05d}.txt": f"doc{i} " + "word " * 600 for i in range(NUM_DOCS)}
    return write_corpus(texts, tmp_path_factory.mktemp("memora_docs"))


class Ranked:
    """The first stage ranks the documents in id order."""

    def search(self, query: str, k: int) -> list[Hit]:
        return [Hit(f"stackexchange/biology/doc_{i:05d}.txt", 100.0 - i) for i in range(min(k, NUM_DOCS))]

    def batch_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]


def env_over(corpus: str, **overrides) -> MemoraEnv:
    return MemoraEnv(retriever=NamedRetrievers({"first_stage": Ranked()}), corpus_path=corpus, **overrides)


def candidate_lines(text: str) -> dict[str, str]:
    """docid -> the text shown after it, per ``[n] (score) docid: text`` line."""
    found = re.findall(r"^\[\d+\] \([0-9.]+\) (\S+): (.*)$", text, flags=re.M)
    return dict(found)


@pytest.mark.parametrize(
    "overrides,query",
    [
        ({"doc_chars": 1000}, "Why do cells divide?"),  # 30 x 1,000 characters of text: about 32,900 in all
        ({}, "Why do cells divide? " + "Some context. " * 640),  # the recipe's 200, a 9,000-character query
    ],
)
def test_a_pool_over_the_bound_keeps_every_candidate_id_and_records_the_cut(corpus, overrides, query) -> None:
    options = {"query": query, "qrels": {"stackexchange/biology/doc_00003.txt": 1}}
    full_obs, _ = env_over(corpus, max_obs_chars=10**6, **overrides).reset(options=options)
    env = env_over(corpus, **overrides)
    obs, info = env.reset(options=options)
    text, limit = obs["text"], env.config.max_obs_chars
    assert len(full_obs["text"]) > limit == 16384 and len(text) <= limit
    assert text.startswith(f"Query: {query}\n\nDomain memory:")
    assert text.endswith("Budget left: decompose 2, subquery 5, extract 10, judge 2; turns 16.")
    shown = candidate_lines(text)
    assert (
        list(shown) == [r["docid"] for r in info["view"]["candidates"]] and len(shown) == 30
    )  # all, in order
    # Evenly: every text is cut to the same length, the largest that fits, and ends with the mark.
    cap = len(next(iter(shown.values())))
    assert all(t.endswith(CUT) and len(t) == cap for t in shown.values())
    doc_chars = env.config.doc_chars
    assert (
        len(full_obs["text"]) - 30 * (doc_chars - cap)
        <= limit
        < len(full_obs["text"]) - 30 * (doc_chars - cap - 1)
    )
    assert events_of(info["events"], "observation_cut") == [
        {
            "type": "observation_cut",
            "turn": -1,
            "part": "documents",
            "num_chars": len(full_obs["text"]) - len(text),
            "rounds": [],
        }
    ]
    # A candidate whose text was shown (cut) is listed by id alone afterwards: nothing more to cut.
    obs, *_, info = env.step(
        turn("<decompose><factor p=1>cell cycle</factor><factor p=1>mitosis</factor></decompose>")
    )
    assert obs["text"].count("(text above)") == 30 and len(events_of(info["events"], "observation_cut")) == 1


def test_a_view_that_fits_reads_exactly_as_before() -> None:
    env = small_env()
    obs, info = env.reset(options=OPTIONS)
    assert obs["text"] == (
        "Query: q\n\nDomain memory: no similar past episode (0 stored).\n\nFactors: none yet.\n"
        "Candidates (top 4 of 4 by factor-aware score):\n[1] (0.090) a: alpha one\n[2] (0.068) b: beta two\n"
        "[3] (0.045) c: gamma three\n[4] (0.023) d: delta four\n"
        "Controller signals: top-K margin 0.0225, evidence support 0.00\n"
        "Budget left: decompose 2, subquery 5, extract 10, judge 2; turns 16."
    )
    env.step(turn("<decompose><factor p=3>gamma</factor><factor p=1>three</factor></decompose>"))
    obs, *_, info = env.step(turn("<subquery f=1>sub</subquery>"))
    assert obs["text"] == (
        "Factors (priority given -> used; memory prior helped/hurt):\n  f1 'gamma': 3.00 -> 0.75 (h=0, l=0)\n"
        "  f2 'three': 1.00 -> 0.25 (h=0, l=0)\nCandidates (top 4 of 5 by factor-aware score):\n"
        "[1] (0.090) a (text above)\n[5] (0.090) e: epsilon five\n[2] (0.068) b (text above)\n"
        "[3] (0.045) c (text above)\nController signals: top-K margin 0.0225, evidence support 0.00\n"
        "Budget left: decompose 1, subquery 4, extract 10, judge 2; turns 14."
    )
    assert not events_of(info["events"], "observation_cut")
