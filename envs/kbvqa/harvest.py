"""Checked retrieval labels from one finished KB-VQA episode: what retriever co-training learns from.

A verification decision is a label only where the env can check it against the gold entity its ``verification``
event carries (the row's ``gold_entities``):

- a Rerank of the gold entity: the gold is a positive of that query image; the batch's other candidates were
  reranked away, hard negatives;
- a Rerank of another entity: that entity is a hard negative (the gold says it is wrong); nothing is positive;
- a Reject of a batch without the gold (a right rejection): every candidate is a hard negative;
- a Reject of a batch that held the gold: no label (the policy was wrong, and its decision is what is harvested).

A decision on an image whose gold is unknown is never a label, whatever it decided: it is counted as unverified.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragym.envs.events import Event, events_of


@dataclass(frozen=True)
class Label:
    """The checked labels of one query image from one episode."""

    query: str
    """The query image as the row names it (relative to the KB folder, or absolute)."""
    question: str
    """The episode's question (what keeps held-out questions out of the buffer)."""
    positives: tuple[str, ...]
    """Entities confirmed and checked right (at most one per batch)."""
    negatives: tuple[str, ...]
    """Entities rightly rejected, reranked away, or confirmed and checked wrong."""


@dataclass
class Harvest:
    """What one or more episodes yield, with the counts the engines log per step."""

    labels: list[Label] = field(default_factory=list)
    """One per query image that got a checked label."""
    positives: int = 0
    """Checked-right confirmations."""
    negatives: int = 0
    """Hard negatives (entities)."""
    unverified: int = 0
    """Decisions the env could not check (no gold): never a label."""
    wrong_confirmations: int = 0
    """Confirmations the gold contradicts (their entity is a negative)."""

    def add(self, other: Harvest) -> None:
        """Fold ``other`` into this one."""
        self.labels.extend(other.labels)
        for name in ("positives", "negatives", "unverified", "wrong_confirmations"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def harvest_episode(events: Sequence[Event], options: Mapping[str, Any]) -> Harvest:
    """The checked labels of one episode from its events and its row's env options (``query_images``,
    ``question``).

    >>> from ragym.envs.kbvqa import events as kbvqa_ev
    >>> opts = {"question": "q?", "query_images": ["queries/0.png"]}
    >>> evs = [kbvqa_ev.verification(1, "reject", None, 1, 0, ["a"], "g"),
    ...        kbvqa_ev.verification(3, "rerank", "g", 1, 1, ["g", "b"], "g")]
    >>> h = harvest_episode(evs, opts)
    >>> h.labels[0].positives, h.labels[0].negatives, (h.positives, h.negatives, h.unverified)
    (('g',), ('a', 'b'), (1, 2, 0))
    >>> harvest_episode([kbvqa_ev.verification(1, "rerank", "a", 1, 0, ["a"], None)], opts).unverified
    1
    """
    harvest = Harvest()
    positives: dict[int, list[str]] = {}
    negatives: dict[int, list[str]] = {}
    for decision in events_of(list(events), "verification"):
        image, gold, candidates = decision["image"], decision["gold_entity"], decision["candidates"]
        if gold is None:
            harvest.unverified += 1  # nothing to check it against: never a positive, never a negative
            continue
        found: list[str] = []
        if decision["decision"] == "rerank":
            if decision["entity"] == gold:
                positives.setdefault(image, []).append(gold)
                harvest.positives += 1
                found = [c for c in candidates if c != gold]
            else:
                harvest.wrong_confirmations += 1
                found = [decision["entity"]]
        elif gold not in candidates:  # a right rejection
            found = list(candidates)
        if found:
            negatives.setdefault(image, []).extend(found)
            harvest.negatives += len(found)
    queries = list(options.get("query_images") or [])
    for image in sorted(set(positives) | set(negatives)):
        if not 1 <= image <= len(queries):
            raise ValueError(f"a verification names image {image}; the row has {len(queries)} query images")
        harvest.labels.append(
            Label(
                str(queries[image - 1]),
                str(options.get("question", "")),
                tuple(dict.fromkeys(positives.get(image, []))),
                tuple(dict.fromkeys(negatives.get(image, []))),
            )
        )
    return harvest
