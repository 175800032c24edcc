"""DocMemo-v0's own episode metrics, from its events alone (the shared ones: ``ragym.envs.metrics``)."""

from __future__ import annotations

from ragym.envs.events import Event, events_of
from ragym.envs.metrics import Metrics, register_metrics

ACTION_KINDS = ("select", "refine", "answer", "invalid")
"""Every ``action`` kind DocMemo-v0 records."""


@register_metrics("DocMemo-v0", action_kinds=ACTION_KINDS)
def docmemo_metrics(events: list[Event]) -> Metrics:
    """Rounds run, pages accumulated, distinct evidence pages shown, refinements, pages marked useful /
    irrelevant, and whether the answer declared the question not answerable (None without an answer)."""
    selected = events_of(events, "selected")
    feedback = events_of(events, "feedback")
    answers = events_of(events, "answer")
    return {
        "rounds": float(len(events_of(events, "candidates"))),
        "pages_accumulated": float(len(selected[-1]["accumulated"])) if selected else 0.0,
        "evidence_pages": float(len({p for e in events_of(events, "evidence") for p in e["pages"]})),
        "refinements": float(len(feedback)),
        "pages_marked_useful": float(sum(len(f["useful"]) for f in feedback)),
        "pages_marked_irrelevant": float(sum(len(f["irrelevant"]) for f in feedback)),
        "not_answerable": float(answers[-1]["not_answerable"]) if answers else None,
    }
