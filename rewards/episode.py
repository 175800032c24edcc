"""A finished episode as rewards see it: the policy's turn texts, the env's events, the ground truth."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Episode:
    """Everything a reward may read. Rewards never look at env internals, only at this."""

    data_source: str
    """Benchmark the row came from (``infoseek``, ``evqa``, ``mmhops``, ``mmlongbench_doc``, ``synthetic_kbvqa``...)."""
    turns: list[str]
    """The policy's raw text for each turn, in order (decoded generated tokens only)."""
    events: list[dict[str, Any]]
    """``info["events"]`` of the final step (see ``ragym.envs.events``)."""
    ground_truth: Any
    """The benchmark's own annotation form (see ``ragym.rewards.score_answer``)."""
    truncated: bool = False
    """The episode ended by a turn or length budget, not by an answer."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else the row carried (split, question id...); rewards may ignore it."""
    env_id: str | None = None
    """The registered env that played the episode (``format`` judges a turn the env never saw with its parser);
    None when unknown."""

    def to_json(self) -> str:
        """One jsonl line."""
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Episode:
        """Inverse of ``to_json`` after ``json.loads``; unknown keys are an error naming them."""
        known = {"data_source", "turns", "events", "ground_truth", "truncated", "extra", "env_id"}
        unknown = set(row) - known
        if unknown:
            raise ValueError(f"episode has unknown keys {sorted(unknown)}")
        missing = {"data_source", "turns", "events", "ground_truth"} - set(row)
        if missing:
            raise ValueError(f"episode is missing keys {sorted(missing)}")
        return cls(**row)
