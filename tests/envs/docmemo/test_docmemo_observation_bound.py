"""DocMemo-v0 observations within ``max_obs_chars``: the candidate view shortens episodic memory (oldest notes
first) and keeps its candidates, any cut is an ``observation_cut`` event, and a cut never separates images from
their placeholders."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.docmemo.env import DocMemoEnv
from ragym.envs.docmemo.store import DocStore, doc_key, save_store
from ragym.envs.docmemo.views import shorten_memory
from ragym.envs.events import events_of
from tests.envs.docmemo.test_docmemo import FixedRetriever, turn
from tests.envs.fakes import EveryName

CUT = "… [cut]"


def small_env(tmp_path, texts: tuple[str, ...] | None = None, **overrides) -> tuple[DocMemoEnv, dict]:
    """An env over a 12-page text document on disk whose last page scores highest (summaries "Summary p")."""
    texts = texts or tuple(f"Page {p} text." for p in range(1, 13))
    num_pages = len(texts)
    summaries = tuple(f"Summary {p}." for p in range(1, num_pages + 1))
    embeddings = np.ones((num_pages, 4), np.float32) / 2
    store = DocStore("doc.pdf", texts, summaries, ("text",) * num_pages, embeddings, "fixed")
    save_store(store, tmp_path / doc_key("doc.pdf"), dpi=72)
    scores = [(p + 1) / num_pages for p in range(num_pages)]
    config = {"show_images": False, **overrides}
    env = DocMemoEnv(store_root=str(tmp_path), retriever=EveryName(FixedRetriever(scores)), **config)
    return env, {"question": "Which page?", "doc_id": "doc.pdf"}


def refine(note: str, query: str = "next") -> str:
    return turn(f"<refine><query>{query}</query><note>{note}</note></refine>")


def play_rounds(env, options, notes: list[str]) -> list[tuple[dict, dict]]:
    """Reset, then per note: select the first candidate and refine with that note; (obs, info) of each round."""
    obs, info = env.reset(seed=0, options=options)
    starts = [(obs, info)]
    for note in notes:
        first = events_of(info["events"], "candidates")[-1]["pages"][0]
        env.step(turn(f"<select>{first}</select>"))
        obs, _, _, _, info = env.step(refine(note))
        starts.append((obs, info))
    return starts


def test_long_notes_over_six_rounds_keep_every_candidate_and_record_the_cut(tmp_path):
    notes = [str(i) * 8000 for i in range(1, 6)]  # rounds 1-5 each leave an 8,000-character note
    env, options = small_env(tmp_path, max_rounds=6, max_turns=12)
    starts = play_rounds(env, options, notes)
    roomy, _ = small_env(tmp_path, max_rounds=6, max_turns=12, max_obs_chars=10**6)
    full_text = play_rounds(roomy, options, notes)[-1][0]["text"]

    obs, info = starts[-1]
    text = obs["text"]
    candidates = events_of(info["events"], "candidates")[-1]["pages"]
    assert len(candidates) == 8 and all(f"[p{p}] (text) Summary {p}." in text for p in candidates)
    assert text.startswith("Question: Which page?\n")
    assert "Round 6 of 6. Search query: next" in text
    assert text.endswith("Select pages to read with <select>..</select>, or answer.")
    assert len(text) == env.config.max_obs_chars == 32768
    lines = {
        n: next(line for line in text.split("\n") if line.startswith(f"  Round {n}:")) for n in range(1, 6)
    }
    # 40,846 characters in 32,768: the oldest note shrinks to the mark alone (7,993 fewer), the next loses the other
    # 85 (8,000 - 85 - 7 of its own kept), the newer three stay whole.
    assert len(full_text) == 40_846
    assert "; note: " + CUT + "; useful" in lines[1]
    assert "; note: " + "2" * 7908 + CUT + "; useful" in lines[2]
    assert all("; note: " + str(n) * 8000 + "; useful" in lines[n] for n in (3, 4, 5))
    cuts = events_of(info["events"], "observation_cut")
    assert cuts == [
        {"type": "observation_cut", "turn": 9, "part": "memory", "num_chars": 8078, "rounds": [0, 1]}
    ]
    # The earlier rounds fitted: no cut before the fifth note.
    assert all(not events_of(i["events"], "observation_cut") for _, i in starts[:-1])


def test_an_episode_that_fits_is_not_cut_and_reads_as_before(tmp_path):
    env, options = small_env(tmp_path, num_candidates=3, max_rounds=2)
    (_, _), (obs, info) = play_rounds(env, options, ["see totals"])
    assert not events_of(info["events"], "observation_cut")
    candidates = events_of(info["events"], "candidates")[-1]["pages"]  # the Thompson draw's order
    assert sorted(candidates) == [10, 11, 12] and obs["text"] == "\n".join(
        [
            "Question: Which page?",
            "Document: 12 pages (12 text).",
            "Memory of earlier rounds:",
            '  Round 1: read pages 12; query "next"; note: see totals; useful: none; irrelevant: none',
            "Round 2 of 2. Search query: next",
            "Candidate pages (best first):",
            *[f"  [p{p}] (text) Summary {p}." for p in candidates],
            "Pages already selected: 12",
            "Select pages to read with <select>..</select>, or answer.",
        ]
    )


def test_a_question_over_the_limit_is_cut_at_the_tail_with_an_event(tmp_path):
    env, _ = small_env(tmp_path, max_obs_chars=1000)
    obs, info = env.reset(seed=0, options={"question": "Why " * 300, "doc_id": "doc.pdf"})
    assert len(obs["text"]) == 1000 and obs["text"].endswith(CUT)
    # The view: question line, schema line, round line with the question as query, 8 candidates, instruction.
    expected = len("Question: ") + 1200 + 1 + len("Document: 12 pages (12 text).") + 1
    expected += len("Round 1 of 3. Search query: ") + 1200 + 1 + len("Candidate pages (best first):") + 1
    expected += sum(len(f"  [p{p}] (text) Summary {p}.") + 1 for p in range(5, 13))
    expected += len("Select pages to read with <select>..</select>, or answer.")
    assert events_of(info["events"], "observation_cut") == [
        {"type": "observation_cut", "turn": -1, "part": "tail", "num_chars": expected - 1000, "rounds": []}
    ]


def evidence_env(tmp_path, max_obs_chars: int) -> tuple[DocMemoEnv, dict]:
    """Three 500-character evidence excerpts with a page image each, in a bound of ``max_obs_chars``."""
    texts = tuple(chr(ord("a") + p) * 500 for p in range(12))
    return small_env(tmp_path, texts, show_images=True, evidence_text_chars=500, max_obs_chars=max_obs_chars)


def test_an_evidence_cut_after_the_last_image_keeps_the_images_and_records_the_cut(tmp_path):
    env, options = evidence_env(tmp_path, max_obs_chars=1200)
    env.reset(seed=0, options=options)
    obs, _, _, _, info = env.step(turn("<select>12,11,10</select>"))
    assert len(obs["images"]) == obs["text"].count(IMAGE_PLACEHOLDER) == 3
    assert len(obs["text"]) == 1200 and obs["text"].endswith(CUT)
    assert events_of(info["events"], "observation_cut")[0]["part"] == "tail"


def test_an_evidence_cut_that_would_drop_an_image_placeholder_fails_the_episode(tmp_path):
    env, options = evidence_env(tmp_path, max_obs_chars=560)
    env.reset(seed=0, options=options)
    with pytest.raises(ValueError, match=r"max_obs_chars.*1 of 3 image placeholders"):
        env.step(turn("<select>12,11,10</select>"))


@pytest.mark.parametrize(
    "excess,notes,queries,rounds,num_chars",
    [
        (5, ["n" * 8 + CUT, "n" * 20], ["q" * 30, "q" * 30], [0], 5),  # the oldest note alone
        (
            40,
            [CUT, CUT],
            ["q" * 9 + CUT, "q" * 30],
            [0, 1],
            40,
        ),  # both notes to the mark, then the oldest query
        (1000, [CUT, CUT], [CUT, CUT], [0, 1], 72),  # everything to its mark: 72 of the 1,000 saved
    ],
)
def test_memory_is_shortened_notes_first_oldest_first(excess, notes, queries, rounds, num_chars):
    episodic = [
        {"round": r, "query": "q" * 30, "note": "n" * 20, "evidence": [1], "useful": [], "irrelevant": []}
        for r in (0, 1)
    ]
    memory, shortened, saved = shorten_memory(episodic, excess)
    assert [m["note"] for m in memory] == notes and [m["query"] for m in memory] == queries
    assert (shortened, saved) == (rounds, num_chars)
    assert episodic[0]["note"] == "n" * 20  # the env's own memory keeps the whole note
