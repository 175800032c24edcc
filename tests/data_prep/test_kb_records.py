"""Passage chunking (800 characters, sentence boundaries where possible)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ragym.data_prep.kb_records import PASSAGE_CHARS, chunk_text

SENTENCES = [f"Sentence number {i} says something about the entity." for i in range(40)]


def test_chunks_end_on_sentence_boundaries_when_sentences_fit() -> None:
    chunks = chunk_text(" ".join(SENTENCES))
    assert len(chunks) > 1 and all(len(c) <= PASSAGE_CHARS for c in chunks)
    assert all(c.endswith(".") and c.startswith("Sentence") for c in chunks)
    assert " ".join(chunks) == " ".join(SENTENCES)
    # Greedy packing: a chunk could not have taken the next sentence.
    for chunk, following in zip(chunks, chunks[1:], strict=False):
        assert len(chunk) + 1 + len(following.split(". ")[0]) + 1 > PASSAGE_CHARS


def test_an_overlong_sentence_is_cut_at_a_space() -> None:
    words = "word " * 400  # 2,000 characters, no sentence end
    chunks = chunk_text(f"Short one. {words}")
    assert chunks[0] == "Short one." and all(len(c) <= PASSAGE_CHARS for c in chunks)
    assert all(c.split() and not c.startswith(" ") for c in chunks)
    assert chunk_text("x" * 1700) == ["x" * 800, "x" * 800, "x" * 100]  # no space: a hard cut


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab .!?\n\t"), max_size=3000), st.integers(5, 900))
def test_chunking_keeps_every_word_and_the_limit(text: str, limit: int) -> None:
    chunks = chunk_text(text, max_chars=limit)
    assert all(0 < len(c) <= limit for c in chunks)
    assert re.sub(r"\s+", "", "".join(chunks)) == re.sub(r"\s+", "", text)
