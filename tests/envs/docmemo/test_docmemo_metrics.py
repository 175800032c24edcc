"""DocMemo-v0 episode metrics (``ragym.envs.docmemo.metrics``) on a hand-built two-round episode."""

from __future__ import annotations

from ragym.envs import events as ev
from ragym.envs.docmemo import events as docmemo_ev
from ragym.envs.metrics import episode_metrics


def test_docmemo_metrics() -> None:
    events = [
        docmemo_ev.candidates(-1, 0, "q", 1.0, [3, 4], [0.9, 0.8], [0.5] * 6),
        ev.action(0, "select", True),
        docmemo_ev.selected(0, 0, [3, 4], [3, 4]),
        docmemo_ev.evidence(0, 0, [3, 4], [0.5, 0.5], [3, 4]),
        ev.action(1, "refine", True),
        docmemo_ev.feedback(1, 0, "q2", "n", [3], [4, 5]),
        docmemo_ev.beliefs(1, 0, [0.5] * 6),
        docmemo_ev.candidates(1, 1, "q2", 0.5, [2], [0.7], [0.5] * 6),
        ev.action(2, "select", True),
        docmemo_ev.selected(2, 1, [2], [3, 4, 2]),
        docmemo_ev.evidence(2, 1, [3, 2], [0.6, 0.5], [2]),
        ev.action(3, "answer", True),
        docmemo_ev.docmemo_answer(3, "Not answerable", True, 1),
    ]
    metrics = episode_metrics("DocMemo-v0", events)
    assert {k: metrics[k] for k in ("rounds", "pages_accumulated", "evidence_pages", "refinements")} == {
        "rounds": 2.0,
        "pages_accumulated": 3.0,
        "evidence_pages": 3.0,
        "refinements": 1.0,
    }
    assert (metrics["pages_marked_useful"], metrics["pages_marked_irrelevant"]) == (1.0, 2.0)
    assert (metrics["not_answerable"], metrics["turns"], metrics["actions/select"]) == (1.0, 4.0, 2.0)
