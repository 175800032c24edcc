"""DocMemo reward terms: answer correctness (MMLongBench-Doc rules), format, and step-level evidence terms.

All terms read ``episode.events`` (vocabulary in ``ragym.envs.docmemo.env``) and the ground truth
``{"answer", "answer_format", "evidence_pages"}`` (1-based pages, empty for "Not answerable"). The
evidence terms return None for questions without gold pages, so the rubric skips them there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragym.envs.docmemo.actions import ParseError, parse_action
from ragym.envs.events import events_of
from ragym.rewards.answers import score_answer
from ragym.rewards.episode import Episode
from ragym.rewards.registry import register_reward
from ragym.rewards.text import has_markup
from ragym.rewards.turn_format import TurnFormatParams, parses_with, turn_format_score

_PARSES = parses_with(parse_action, ParseError)


def _gold_pages(episode: Episode) -> set[int]:
    truth = episode.ground_truth
    if not isinstance(truth, dict) or "evidence_pages" not in truth:
        raise ValueError(
            f"{episode.data_source}: DocMemo rewards need ground_truth.evidence_pages, got {truth!r}"
        )
    return {int(p) for p in truth["evidence_pages"]}


@dataclass(frozen=True)
class AnswerParams:
    """Recipe parameters of ``docmemo_answer``."""

    unanswered: float = 0.0
    """Score of an episode that ended without an answer (turn or round budget)."""
    markup_scores_zero: bool = True
    """An answer containing a tag scores 0: tag injection earns nothing."""


@register_reward("docmemo_answer", params=AnswerParams)
def docmemo_answer(episode: Episode, **params: Any) -> float | None:
    """The MMLongBench-Doc score of the final answer (``Not answerable`` included), in [0, 1].

    >>> gt = {"answer": "Not answerable", "answer_format": "None", "evidence_pages": []}
    >>> ev = [{"type": "answer", "turn": 3, "text": "Not answerable", "not_answerable": True, "round": 1}]
    >>> docmemo_answer(Episode("mmlongbench_doc", ["..."] * 4, ev, gt))
    1.0
    """
    cfg = AnswerParams(**params)
    answers = events_of(episode.events, "answer")
    if not answers:
        return cfg.unanswered
    text = answers[0]["text"]
    if cfg.markup_scores_zero and has_markup(text):
        return 0.0
    return score_answer("mmlongbench_doc", text, episode.ground_truth)


FormatParams = TurnFormatParams
"""Recipe parameters of ``docmemo_format`` (shared with the other per-turn format rewards)."""


@register_reward("docmemo_format", params=FormatParams)
def docmemo_format(episode: Episode, **params: Any) -> float | None:
    """Whether every turn followed the DocMemo grammar (binary) or the share that did (fraction).

    >>> ev = [{"type": "action", "turn": 0, "kind": "select", "well_formed": True},
    ...       {"type": "action", "turn": 1, "kind": "refine", "well_formed": True},
    ...       {"type": "protocol_violation", "turn": 1, "reason": "unseen_page", "pages": [9]}]
    >>> ep = Episode("mmlongbench_doc", ["t0", "t1"], ev, {"evidence_pages": []})
    >>> docmemo_format(ep), docmemo_format(ep, mode="fraction", count_violations=False)
    (0.0, 1.0)
    """
    return turn_format_score(episode, FormatParams(**params), _PARSES)


@dataclass(frozen=True)
class UsefulParams:
    """Recipe parameters of ``docmemo_useful_gold``."""

    gold_credit: float = 1.0
    """Credit per gold evidence page marked useful (once, however many rounds mark it)."""
    non_gold_cost: float = 0.0
    """Cost per page marked useful that is not gold evidence (once, however many rounds mark it)."""


@register_reward("docmemo_useful_gold", params=UsefulParams)
def docmemo_useful_gold(episode: Episode, **params: Any) -> float | None:
    """Mean credit over the distinct pages the policy marked useful: gold pages earn ``gold_credit``, others
    cost ``non_gold_cost``. A page re-marked in a later round counts once: marking it again is no new evidence.

    0 when the policy marked nothing useful; None without gold pages.

    >>> def marked(*rounds):  # one feedback round per list of pages marked useful; page 4 is the gold one
    ...     ev = [{"type": "feedback", "turn": 1 + 2 * r, "round": r, "useful": pages, "irrelevant": [],
    ...            "query": "q", "note": ""} for r, pages in enumerate(rounds)]
    ...     return Episode("mmlongbench_doc", [], ev, {"evidence_pages": [4]})
    >>> docmemo_useful_gold(marked([4, 9]), non_gold_cost=0.5), docmemo_useful_gold(marked([4, 9], [4], [4]))
    (0.25, 0.5)
    """
    cfg = UsefulParams(**params)
    gold = _gold_pages(episode)
    if not gold:
        return None
    marks = {p for e in events_of(episode.events, "feedback") for p in e["useful"]}
    if not marks:
        return 0.0
    return sum(cfg.gold_credit if p in gold else -cfg.non_gold_cost for p in marks) / len(marks)


@dataclass(frozen=True)
class IrrelevantParams:
    """Recipe parameters of ``docmemo_irrelevant_gold``."""

    cost: float = 1.0
    """Cost when every gold page was marked irrelevant (scaled by the share of gold pages so marked)."""


@register_reward("docmemo_irrelevant_gold", params=IrrelevantParams)
def docmemo_irrelevant_gold(episode: Episode, **params: Any) -> float | None:
    """Minus ``cost`` times the share of gold pages the policy ever marked irrelevant; None without gold.

    >>> ev = [{"type": "feedback", "turn": 1, "round": 0, "useful": [], "irrelevant": [4, 5], "query": "q",
    ...        "note": ""}]
    >>> docmemo_irrelevant_gold(Episode("mmlongbench_doc", [], ev, {"evidence_pages": [4, 8]}))
    -0.5
    """
    cfg = IrrelevantParams(**params)
    gold = _gold_pages(episode)
    if not gold:
        return None
    marked = {p for e in events_of(episode.events, "feedback") for p in e["irrelevant"]}
    return 0.0 - cfg.cost * len(marked & gold) / len(gold)  # 0.0 - x: no "-0.0" in logs


@dataclass(frozen=True)
class RecallParams:
    """Recipe parameters of ``docmemo_evidence_recall``."""

    scope: str = "episode"
    """``episode``: gold pages shown as evidence in any round; ``final``: in the last evidence view only."""

    def __post_init__(self) -> None:
        if self.scope not in ("episode", "final"):
            raise ValueError(f"scope must be 'episode' or 'final', got {self.scope!r}")


@register_reward("docmemo_evidence_recall", params=RecallParams)
def docmemo_evidence_recall(episode: Episode, **params: Any) -> float | None:
    """Share of gold pages among the evidence pages shown to the policy; None without gold pages.

    >>> ev = [{"type": "evidence", "turn": 0, "round": 0, "pages": [3, 4], "means": [0.6, 0.5]},
    ...       {"type": "evidence", "turn": 2, "round": 1, "pages": [8], "means": [0.7]}]
    >>> ep = Episode("mmlongbench_doc", [], ev, {"evidence_pages": [4, 8]})
    >>> docmemo_evidence_recall(ep), docmemo_evidence_recall(ep, scope="final")
    (1.0, 0.5)
    """
    cfg = RecallParams(**params)
    gold = _gold_pages(episode)
    if not gold:
        return None
    views = [set(e["pages"]) for e in events_of(episode.events, "evidence")]
    if not views:
        return 0.0
    shown = set().union(*views) if cfg.scope == "episode" else views[-1]
    return len(shown & gold) / len(gold)
