"""Per-step metrics: batch means of rewards and episode metrics (``ragym.envs.metrics``), and sinks (console, jsonl, wandb).

wandb runs offline when ``WANDB_API_KEY`` is not set (sync later with ``wandb sync``);
``WANDB_MODE=disabled`` turns it off entirely.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ragym.envs.files import read_jsonl, read_log
from ragym.envs.metrics import mean_metrics

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
"""A run's per-step metrics, one JSON object per line (``{"step": N, <name>: <value>, ...}``), in its output folder:
the local engine's and verl's (``ragym.rl.verl_plugin.trainer``) alike."""


def summarize(
    rewards: list[float],
    breakdowns: list[dict[str, float]],
    stats: list[dict[str, float | None]],
    group_ids: list[str],
) -> dict[str, float]:
    """Batch means of rewards, reward terms and episode metrics, plus the share of zero-advantage groups.

    An episode metric is averaged over the episodes where it applies, and left out where it applies to none.
    """
    out: dict[str, float] = {"reward/total": float(np.mean(rewards))}
    for key in sorted({k for b in breakdowns for k in b}):
        out[key] = float(np.mean([b.get(key, 0.0) for b in breakdowns]))
    out.update({f"episode/{k}": v for k, v in mean_metrics(stats).items() if v is not None})
    groups: dict[str, list[float]] = {}
    for gid, reward in zip(group_ids, rewards, strict=True):
        groups.setdefault(gid, []).append(reward)
    # A group whose episodes all scored the same has zero advantage: it teaches GRPO nothing.
    flat = [np.ptp(values) < 1e-9 for values in groups.values() if len(values) > 1]
    out["grpo/zero_adv_group_share"] = float(np.mean(flat)) if flat else 0.0
    return out


def advantage_stats(advantages: Any, mask: Any) -> dict[str, float]:
    """Mean/std/max/min of per-token advantages over mask-1 tokens."""
    values = advantages[mask.bool()]
    if values.numel() == 0:
        return {}
    return {
        "grpo/adv_mean": float(values.mean()),
        "grpo/adv_std": float(values.std()) if values.numel() > 1 else 0.0,
        "grpo/adv_max": float(values.max()),
        "grpo/adv_min": float(values.min()),
    }


def response_length_stats(lengths: list[int], limit: int) -> dict[str, float]:
    """verl's ``response_length/*``: mean/max/min of response-side tokens and the share at the ``limit``."""
    if not lengths:
        return {}
    values = np.asarray(lengths, dtype=np.float64)
    return {
        "response_length/mean": float(values.mean()),
        "response_length/max": float(values.max()),
        "response_length/min": float(values.min()),
        "response_length/clip_ratio": float(np.mean(values >= limit)),
    }


IMAGE_PAD = "<|image_pad|>"
"""The placeholder the processor expands to one token per merged image patch (Qwen2.5-VL, Qwen3-VL)."""
IMAGES = "images/per_episode"
"""Images an episode carried (its prompt's and its observations'), batch mean."""
IMAGE_TOKENS = "images/tokens_per_episode"
"""Image placeholder tokens in an episode's ids (what the model saw of them), batch mean."""


def image_metrics(num_images: list[int], token_ids: list[list[int]], pad_id: int) -> dict[str, float]:
    """Images carried and image tokens trained on per episode: images with no tokens were dropped on the way.

    >>> image_metrics([2, 0], [[7, 9, 9, 9, 9], [7]], pad_id=9)
    {'images/per_episode': 1.0, 'images/tokens_per_episode': 2.0}
    """
    if not num_images:
        return {}
    tokens = [sum(1 for t in ids if t == pad_id) for ids in token_ids]
    return {IMAGES: float(np.mean(num_images)), IMAGE_TOKENS: float(np.mean(tokens))}


class MetricsSink:
    """Writes step metrics to ``metrics.jsonl`` (always), the console and wandb (when configured)."""

    def __init__(
        self, out_dir: str | Path, loggers: Iterable[str], project: str, run_name: str, config: dict[str, Any]
    ) -> None:
        self.path = Path(out_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        loggers = set(loggers)
        unknown = loggers - {"console", "wandb"}
        if unknown:
            raise ValueError(
                f"trainer.logger: unsupported loggers {sorted(unknown)} (local engine: console, wandb)"
            )
        self.console = "console" in loggers
        self.wandb = None
        if "wandb" in loggers and os.environ.get("WANDB_MODE") != "disabled":
            import wandb

            # WANDB_MODE is wandb's own variable, passed on for wandb to check (its type is a Literal of modes).
            mode: Any = os.environ.get("WANDB_MODE") or (
                "online" if os.environ.get("WANDB_API_KEY") else "offline"
            )
            self.wandb = wandb.init(
                project=project,
                name=run_name,
                config=config,
                dir=str(self.path.parent),
                mode=mode,
                resume="allow",
            )

    def log(self, step: int, metrics: dict[str, float], extra: dict[str, Any] | None = None) -> None:
        """Record ``metrics`` for ``step`` in every sink; ``extra`` (non-scalar data) goes to the jsonl only."""
        append_metrics(self.path, step, {**metrics, **(extra or {})})
        if self.console:
            shown = {
                k: v
                for k, v in metrics.items()
                if k.startswith(("reward/", "grpo/zero", "actor/entropy", "dynamic_sampling/flat"))
            }
            logger.info("step %d %s", step, " ".join(f"{k}={v:.3f}" for k, v in sorted(shown.items())))
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def close(self) -> None:
        """Flush and close wandb."""
        if self.wandb is not None:
            self.wandb.finish()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics jsonl, in order."""
    return [record for _, record in read_jsonl(path)]


def metrics_by_step(records: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Metrics records by step, a step's records merged in order (verl logs an evaluation before training apart).

    >>> metrics_by_step([{"step": 2, "a": 1.0}, {"step": 2, "b": 0.5}, {"step": 3, "a": 2.0}])
    {2: {'a': 1.0, 'b': 0.5}, 3: {'a': 2.0}}
    """
    steps: dict[int, dict[str, Any]] = {}
    for record in records:
        fields = dict(record)
        steps.setdefault(int(fields.pop("step")), {}).update(fields)
    return steps


def append_metrics(path: Path, step: int, record: dict[str, Any]) -> None:
    """Append ``{"step": step, **record}`` to a metrics jsonl as one line, the file closed after it (the row is whole
    in the file once this returns); numpy and torch scalars are written as numbers, anything else JSON cannot hold
    as its text."""
    line = json.dumps({"step": step, **record}, default=_json_scalar) + "\n"
    with path.open("a") as f:
        f.write(line)


def _json_scalar(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item) and getattr(value, "ndim", None) == 0:
        return item()
    return str(value)


def drop_metrics_after(output_dir: str | Path, step: int) -> int:
    """Remove ``metrics.jsonl`` rows logged after ``step`` (a killed run's unsaved steps, which a resume from the
    checkpoint of ``step`` logs again, and a last line the kill cut short); returns how many."""
    path = Path(output_dir) / METRICS_FILE
    if not path.is_file():
        return 0
    # One read: the rows counted, kept and rewritten are the same rows, whatever a late writer appends meanwhile.
    data = path.read_bytes()
    lines = [line for line in data.split(b"\n") if line.strip()]
    records = read_log(path, data)  # a last line the kill cut short is left out (and rewritten without)
    kept = [record for record in records if record["step"] <= step]
    if len(kept) < len(lines):
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(record) + "\n" for record in kept))
        tmp.replace(path)
        logger.info(
            "dropped %d metrics rows logged after step %d (not checkpointed)", len(records) - len(kept), step
        )
    return len(lines) - len(kept)
