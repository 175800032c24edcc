"""DocMemo-v0's own event kinds, one constructor each (pages are 1-based, as in MMLongBench-Doc).

The kinds every env records (``action``, ``format_error``, ``answer``, ...) are made by ``ragym.envs.events``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragym.envs.events import (
    Event,
    answer,
    bool_field,
    float_field,
    float_list,
    int_field,
    int_list,
    make_event,
    register_event_kinds,
    str_field,
)

KINDS = ("candidates", "selected", "evidence", "feedback", "beliefs")
"""The event kinds DocMemo-v0 adds to the shared vocabulary."""
register_event_kinds(*KINDS)


def candidates(
    turn: int,
    round: int,
    query: str,
    lam: float,
    pages: Sequence[int],
    scores: Sequence[float],
    means: Sequence[float],
) -> Event:
    """A round's top-M pages with their scores s, lambda_t, and every page's posterior mean before the draw."""
    shown = int_list("candidates", "pages", pages)
    scored = float_list("candidates", "scores", scores)
    if len(shown) != len(scored):
        raise ValueError(f"candidates event: {len(scored)} scores for {len(shown)} pages")
    return make_event(
        "candidates",
        turn,
        round=int_field("candidates", "round", round, minimum=0),
        query=str_field("candidates", "query", query),
        pages=shown,
        scores=scored,
        means=float_list("candidates", "means", means),
        **{"lambda": float_field("candidates", "lambda", lam)},
    )


def selected(turn: int, round: int, pages: Sequence[int], accumulated: Sequence[int]) -> Event:
    """Pages selected this turn and the accumulated set A_t so far, in order."""
    return make_event(
        "selected",
        turn,
        round=int_field("selected", "round", round, minimum=0),
        pages=int_list("selected", "pages", pages),
        accumulated=int_list("selected", "accumulated", accumulated),
    )


def evidence(
    turn: int, round: int, pages: Sequence[int], means: Sequence[float], new: Sequence[int]
) -> Event:
    """Pages shown as evidence (belief order), their posterior means, and those shown for the first time."""
    shown = int_list("evidence", "pages", pages)
    fresh = int_list("evidence", "new", new)
    if not set(fresh) <= set(shown):
        raise ValueError(f"evidence event: new pages {fresh} are not all among the shown {shown}")
    return make_event(
        "evidence",
        turn,
        round=int_field("evidence", "round", round, minimum=0),
        pages=shown,
        means=float_list("evidence", "means", means),
        new=fresh,
    )


def feedback(
    turn: int, round: int, query: str, note: str, useful: Sequence[int], irrelevant: Sequence[int]
) -> Event:
    """A refinement: the new query, the note, and the pages marked useful / irrelevant."""
    return make_event(
        "feedback",
        turn,
        round=int_field("feedback", "round", round, minimum=0),
        query=str_field("feedback", "query", query),
        note=str_field("feedback", "note", note),
        useful=int_list("feedback", "useful", useful),
        irrelevant=int_list("feedback", "irrelevant", irrelevant),
    )


def beliefs(turn: int, round: int, means: Sequence[float]) -> Event:
    """Every page's posterior mean after a belief update."""
    return make_event(
        "beliefs",
        turn,
        round=int_field("beliefs", "round", round, minimum=0),
        means=float_list("beliefs", "means", means),
    )


def docmemo_answer(turn: int, text: str, not_answerable: bool, round: int) -> Event:
    """DocMemo's ``answer`` event: the shared fields plus ``not_answerable`` and the round (never forced)."""
    return {
        **answer(turn, text, forced=False),
        "not_answerable": bool_field("answer", "not_answerable", not_answerable),
        "round": int_field("answer", "round", round, minimum=0),
    }
