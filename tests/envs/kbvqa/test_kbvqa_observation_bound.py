"""KB-VQA observations within ``max_obs_chars``: SearchText passages over the bound are shortened evenly (each
ending "… [cut]", every query and passage title kept), a text still over it loses its end, each cut is an
``observation_cut`` event, and an observation that fits reads exactly as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.envs import make_env
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.events import events_of
from ragym.envs.kbvqa import prompts
from ragym.envs.kbvqa.actions import SearchText, format_action
from ragym.envs.kbvqa.kb import TEXT_RETRIEVERS, KBRetrievers, load_kb
from ragym.envs.retrieval.hits import Hit
from ragym.envs.turns import LAST_TURN_NOTICE
from tests.envs.kbvqa.test_kbvqa_env import rows

CUT = "… [cut]"


class Passages:
    """Every text query gets ``k`` passages of ``num_chars`` characters, titled by query and rank."""

    def __init__(self, num_chars: int) -> None:
        self.num_chars = num_chars

    def batch_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [
            [
                Hit(f"{q}-{i}", 1.0, {"title": f"{q} {i}", "text": f"{q}{i} " + "x" * self.num_chars})
                for i in range(k)
            ]
            for q in queries
        ]


class Source:
    """The KB's own image retrievers, and ``Passages`` for text search."""

    def __init__(self, kb: Path, num_chars: int) -> None:
        self.kb, self.passages = KBRetrievers(load_kb(kb)), Passages(num_chars)

    def retriever(self, name: str):
        return self.passages if name in TEXT_RETRIEVERS else self.kb.retriever(name)


def search(env, queries: tuple[str, ...], turns_before: int = 0):
    env.reset(seed=0)
    for _ in range(turns_before):
        env.step(format_action(SearchText(("warm up",))))
    return env.step(format_action(SearchText(queries)))


@pytest.mark.parametrize("env_id", ["KBVQA-v0", "KBVQA-Demo-v0"])
def test_passages_over_the_bound_are_shortened_evenly_and_recorded(tiny_kb: Path, env_id: str) -> None:
    queries = ("first recorded", "catalogued by")
    roomy = make_env(env_id, kb_dir=str(tiny_kb), retriever=Source(tiny_kb, 5000))
    full = search(roomy, queries)[0]["text"]
    env = make_env(env_id, kb_dir=str(tiny_kb), retriever=Source(tiny_kb, 5000), max_obs_chars=12_000)
    obs, *_, info = search(env, queries)
    text = obs["text"]
    assert len(full) > 30_000 and len(text) <= 12_000 and env.observation_space.contains(obs)
    assert all(f'Results for "{q}":' in text for q in queries)
    lines = [line for line in text.splitlines() if line.startswith("[")]
    assert [line.split(":", 1)[0] for line in lines] == [
        f"[{i + 1}] {q} {i}" for q in queries for i in range(3)
    ]
    excerpts = [line.split(": ", 1)[1] for line in lines]  # every passage's text cut to one length
    assert len({len(e) for e in excerpts}) == 1 and all(e.endswith(CUT) for e in excerpts)
    assert events_of(info["events"], "observation_cut") == [
        {
            "type": "observation_cut",
            "turn": 0,
            "part": "passages",
            "num_chars": len(full) - len(text),
            "rounds": [],
        }
    ]


def test_the_last_turn_notice_survives_a_passage_cut(tiny_kb: Path) -> None:
    env = make_env(
        "KBVQA-v0", kb_dir=str(tiny_kb), retriever=Source(tiny_kb, 5000), max_obs_chars=12_000, max_turns=3
    )
    obs, *_, info = search(env, ("first recorded",), turns_before=1)  # the second of three turns
    assert obs["text"].endswith(f"{CUT}\n{LAST_TURN_NOTICE}") and len(obs["text"]) <= 12_000
    cuts = events_of(info["events"], "observation_cut")  # the warm-up search's, then this one's
    assert [(e["turn"], e["part"]) for e in cuts] == [(0, "passages"), (1, "passages")]


def test_passages_that_fit_read_exactly_as_before(tiny_kb: Path) -> None:
    env = make_env("KBVQA-v0", kb_dir=str(tiny_kb), retriever=Source(tiny_kb, 100))
    obs, *_, info = search(env, ("first recorded",))
    hits = Passages(100).batch_search(["first recorded"], 3)
    assert obs["text"] == prompts.passages_text(["first recorded"], hits)
    assert not events_of(info["events"], "observation_cut")


def test_a_question_over_the_bound_loses_its_end_and_keeps_the_images(tiny_kb: Path) -> None:
    env = make_env("KBVQA-v0", kb_dir=str(tiny_kb), max_obs_chars=500)
    options = {**rows(tiny_kb, "single")[0], "question": "Why? " * 200}  # 1,000 characters
    obs, info = env.reset(options=options)
    assert len(obs["text"]) == 500 and obs["text"].endswith(CUT)
    assert obs["text"].count(IMAGE_PLACEHOLDER) == len(obs["images"]) == 1
    assert [e["part"] for e in events_of(info["events"], "observation_cut")] == ["tail"]
