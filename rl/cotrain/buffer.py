"""The harvest buffer: checked labels on disk beside the checkpoints, one append-only JSONL shard per step.

``<output_dir>/cotrain/buffer/step_<N>.jsonl`` holds the labels of step N's training episodes, each written whole
(``atomic_write``) after the step's episodes are scored. A resumed run drops the shards after the step it
resumes from, as the metrics file drops its lines, so the buffer is what the checkpoint's run had harvested.
Held-out query images (the evaluation rows, the forgetting guard's rows) are refused at the door
and counted: they never reach a shard.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragym.envs.files import atomic_write, read_jsonl
from ragym.envs.kbvqa.harvest import Harvest, Label

logger = logging.getLogger(__name__)

SHARD = re.compile(r"step_(\d+)\.jsonl$")


@dataclass(frozen=True)
class HeldOut:
    """Query images that must never be trained on: what the retriever is trained on is the query image, and a
    question's text is no key (templated questions repeat across rows)."""

    queries: frozenset[str] = frozenset()
    """Held-out query images, as rows name them."""

    def holds(self, label: Label) -> bool:
        """Whether ``label`` comes from a held-out query image."""
        return label.query in self.queries


@dataclass
class Pooled:
    """Every label of one query image in the buffer."""

    positives: set[str] = field(default_factory=set)
    """Entities confirmed right for it, in any episode."""
    negatives: set[str] = field(default_factory=set)
    """Its hard negatives, in any episode (never one of its positives)."""


class HarvestBuffer:
    """Checked labels of the training episodes, by step, with the counts the engines log."""

    def __init__(self, folder: Path, held_out: HeldOut) -> None:
        self.folder, self.held_out = folder, held_out
        self.folder.mkdir(parents=True, exist_ok=True)
        self._count = sum(1 for _ in self.labels())

    def shards(self) -> list[tuple[int, Path]]:
        """(step, shard) in step order."""
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := SHARD.match(p.name))]
        return sorted(found)

    def drop_after(self, step: int) -> None:
        """Remove the shards of steps after ``step`` (a resumed run redoes them)."""
        for shard_step, path in self.shards():
            if shard_step > step:
                path.unlink()
        self._count = sum(1 for _ in self.labels())

    def add(self, step: int, harvest: Harvest) -> dict[str, float]:
        """Write step ``step``'s labels (held-out ones refused) and return its ``cotrain/`` counts."""
        kept = [label for label in harvest.labels if not self.held_out.holds(label)]
        refused = len(harvest.labels) - len(kept)
        if refused:
            logger.warning("step %d: %d held-out labels refused by the harvest buffer", step, refused)
        lines = "".join(json.dumps(_record(step, label)) + "\n" for label in kept)
        atomic_write(self.folder / f"step_{step:06d}.jsonl", lines)
        self._count += len(kept)
        return {
            "cotrain/positives": float(sum(len(label.positives) for label in kept)),
            "cotrain/negatives": float(sum(len(label.negatives) for label in kept)),
            "cotrain/unverified": float(harvest.unverified),
            "cotrain/wrong_confirmations": float(harvest.wrong_confirmations),
            "cotrain/heldout_refused": float(refused),
            "cotrain/buffer_labels": float(self._count),
        }

    def labels(self, until_step: int | None = None) -> Iterable[dict[str, Any]]:
        """Every stored record (``step``, ``query``, ``question``, ``positives``, ``negatives``) up to a step."""
        for step, path in self.shards():
            if until_step is not None and step > until_step:
                break
            for _, record in read_jsonl(path):
                yield record

    @property
    def num_labels(self) -> int:
        """Records stored."""
        return self._count

    def pooled(self, until_step: int | None = None) -> dict[str, Pooled]:
        """Query image -> its labels over every episode: what a training round reads."""
        pooled: dict[str, Pooled] = {}
        for record in self.labels(until_step):
            entry = pooled.setdefault(record["query"], Pooled())
            entry.positives.update(record["positives"])
            entry.negatives.update(record["negatives"])
        for entry in pooled.values():
            entry.negatives -= (
                entry.positives
            )  # a checked positive wins over a stale negative of another batch
        return pooled


def _record(step: int, label: Label) -> dict[str, Any]:
    return {
        "step": step,
        "query": label.query,
        "question": label.question,
        "positives": list(label.positives),
        "negatives": list(label.negatives),
    }
