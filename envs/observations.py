"""Observation text within ``max_obs_chars``, the bound of every env's observation space.

An env shortens the natural part of a view first (DocMemo its episodic memory, MEMORA its candidates' texts,
KB-VQA its passages: ``shorten_evenly``), so that what the policy acts on stays whole; the turn loop then cuts
whatever is still over the bound at its end (``bound_text``), the last resort. Every cut ends in ``CUT_MARK``, so
the policy sees that something is missing there, and is an ``observation_cut`` event, so none is silent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ragym.envs import events as ev
from ragym.envs.core import IMAGE_PLACEHOLDER

CUT_MARK = "… [cut]"
"""Ends every text shortened to fit ``max_obs_chars``."""


def cut_tail(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters at its end, the last of them ``CUT_MARK`` (where it fits)."""
    if len(text) <= max_chars:
        return text
    if max_chars <= len(CUT_MARK):
        return text[:max_chars]
    return text[: max_chars - len(CUT_MARK)] + CUT_MARK


def even_cap(lengths: Sequence[int], excess: int) -> int:
    """The largest length every text may keep (``cut_tail``) that saves ``excess`` characters over texts of
    ``lengths``; never below ``CUT_MARK``'s length, so it saves less when even the marks alone do not fit.

    >>> even_cap([10, 30, 50], 25)  # 50 -> 27 and 30 -> 27 save 26; a cap of 28 would save 24
    27
    """
    ordered = sorted(lengths, reverse=True)
    total = 0
    for num_cut, length in enumerate(ordered, 1):  # the num_cut longest texts are cut to the cap
        total += length
        cap = (total - excess) // num_cut
        if cap >= (ordered[num_cut] if num_cut < len(ordered) else 0):
            return max(cap, len(CUT_MARK))
    return len(CUT_MARK)


def shorten_evenly(
    render: Callable[[int | None], str], lengths: Sequence[int], max_chars: int
) -> tuple[str, int]:
    """``render(None)``, the full view, when it fits in ``max_chars``; else ``render(cap)``, each of the view's
    shortenable texts (of ``lengths``) cut to one cap (``even_cap``) so that the view fits where the marks allow.
    Also the characters that saved (0: nothing was shortened)."""
    text = render(None)
    if len(text) <= max_chars:
        return text, 0
    short = render(even_cap(lengths, len(text) - max_chars))
    return short, len(text) - len(short)


def bound_text(
    text: str,
    num_images: int,
    max_chars: int,
    *,
    turn: int,
    events: list[ev.Event],
    env: str,
    remedy: str = "raise max_obs_chars",
) -> str:
    """``text`` within ``max_chars``: unchanged when it fits, else its end cut (``cut_tail``) and recorded as an
    ``observation_cut`` event of ``turn`` in ``events``. A cut that would keep fewer image placeholders than the
    observation's ``num_images`` is not made: the agent loop pairs them in order, so the step raises instead,
    naming ``max_obs_chars`` and the ``remedy``."""
    if len(text) <= max_chars:
        return text
    kept = cut_tail(text, max_chars)
    num_placeholders = kept.count(IMAGE_PLACEHOLDER)
    if num_placeholders < num_images:
        raise ValueError(
            f"{env} observation of {len(text)} characters cut to max_obs_chars={max_chars} keeps "
            f"{num_placeholders} of {num_images} image placeholders; {remedy}"
        )
    events.append(ev.observation_cut(turn, "tail", len(text) - len(kept)))
    return kept
