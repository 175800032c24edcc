"""Observations within ``max_obs_chars`` (``ragym.envs.observations``): a part shortened evenly, the tail cut as
the last resort with a visible mark, every cut an ``observation_cut`` event, and no cut that separates images
from their placeholders."""

from __future__ import annotations

import pytest

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.observations import CUT_MARK, bound_text, cut_tail, even_cap, shorten_evenly


@pytest.mark.parametrize(
    "lengths,excess,cap",
    [
        ([10, 30, 50], 5, 45),  # the longest alone: 50 -> 45 saves 5
        ([10, 30, 50], 25, 27),  # 50 -> 27 and 30 -> 27 save 26; a cap of 28 saves only 24
        ([10, 30, 50], 62, 9),  # all three: 1 + 21 + 41 = 63 saved at 9
        ([10, 30, 50], 200, len(CUT_MARK)),  # 69 at most: every text to its mark
        ([], 5, len(CUT_MARK)),
    ],
)
def test_the_even_cap_is_the_largest_that_saves_the_excess(lengths, excess, cap) -> None:
    assert even_cap(lengths, excess) == cap


def test_text_within_the_bound_is_returned_unchanged_and_records_nothing() -> None:
    events: list[dict] = []
    text = f"Image 1: {IMAGE_PLACEHOLDER}\nQuestion: where?"
    assert bound_text(text, 1, len(text), turn=0, events=events, env="Toy") == text
    assert events == []


def test_a_text_over_the_bound_loses_its_end_marked_and_records_the_cut() -> None:
    events: list[dict] = []
    kept = bound_text(f"{IMAGE_PLACEHOLDER} " + "y" * 30, 1, 20, turn=2, events=events, env="Toy")
    assert kept == f"{IMAGE_PLACEHOLDER} yyyyy{CUT_MARK}" and len(kept) == 20
    assert events == [{"type": "observation_cut", "turn": 2, "part": "tail", "num_chars": 18, "rounds": []}]


def test_a_cut_that_would_drop_an_image_placeholder_is_an_error_naming_the_setting() -> None:
    events: list[dict] = []
    text = "intro " * 5 + IMAGE_PLACEHOLDER
    with pytest.raises(
        ValueError, match=r"Toy observation of 37 characters cut to max_obs_chars=20 keeps 0 of 1"
    ):
        bound_text(text, 1, 20, turn=0, events=events, env="Toy")
    assert events == []
    # Without images the same cut is allowed: the text holds no placeholder that pairs with an image.
    assert bound_text(text, 0, 20, turn=0, events=events, env="Toy") == "intro intro i" + CUT_MARK


def test_cut_tail_keeps_the_mark_where_it_fits() -> None:
    assert cut_tail("abcdefghij", 10) == "abcdefghij"
    assert cut_tail("abcdefghijk", 10) == "abc" + CUT_MARK
    assert cut_tail("abcdefghijk", 4) == "abcd"


def test_shorten_evenly_renders_the_full_text_when_it_fits_else_the_capped_one() -> None:
    texts = ["a" * 10, "b" * 30, "c" * 50]

    def render(cap: int | None) -> str:
        return "|".join(t if cap is None else cut_tail(t, cap) for t in texts)

    assert shorten_evenly(render, [10, 30, 50], 100) == (render(None), 0)
    text, num_chars = shorten_evenly(render, [10, 30, 50], 67)  # 92 characters, 25 too many
    assert text == "a" * 10 + "|" + "b" * 20 + CUT_MARK + "|" + "c" * 20 + CUT_MARK and num_chars == 26
