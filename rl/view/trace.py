"""What training and evaluation write for ``ragym view``: a bounded sample of episodes per step.

A trace folder holds ``trace.json`` (its marker and format version), ``episodes.jsonl`` (one line per
recorded episode: turns, the observations the policy read, events, reward terms, token ids, mask,
per-token advantages) and ``images/<sha256 prefix>.png``, each image stored once by content hash.
Per step, whole GRPO groups are recorded (all G episodes of a row), questions recorded at earlier steps
first, so the same question can be followed across training steps.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
from PIL import Image

from ragym.envs.files import atomic_write, read_log
from ragym.envs.image_ref import as_pixels

TRACE_VERSION = 1
"""Format version written in ``trace.json`` and every episode line."""
OFF_POLICY_KEYS = ("weight_versions", "staleness", "turn_weight_versions")
"""Episode fields a verl trainer mode adds (every mode, 0 staleness in sync; per generated turn its (first, last)
weight versions, which differ for a turn aborted at a weight update and resumed), and the local engine with
``ragym.engine.async_rollouts`` (no per-turn versions); its synchronous episodes have none."""
MARKER = "trace.json"
"""The file that makes a folder a trace folder."""


@dataclass(frozen=True)
class TraceConfig:
    """How much of a run is recorded."""

    max_groups_per_step: int = 4
    """GRPO groups (all G episodes of one row) recorded per (phase, step); 0 records nothing."""


def image_key(image: Image.Image) -> str:
    """Content hash of an image (mode, size and pixels): equal pictures get one file."""
    digest = hashlib.sha256(f"{image.mode}{image.size}".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()[:20]


class ImageStore:
    """``images/<key>.png`` files, each written once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.known = {p.stem for p in self.root.glob("*.png")}

    def put(self, image: Image.Image) -> str:
        """Store ``image`` unless an identical one is stored; returns its key."""
        key = image_key(image)
        if key not in self.known:
            buffer = io.BytesIO()
            image.convert("RGB").save(buffer, format="PNG")
            atomic_write(self.root / f"{key}.png", buffer.getvalue())  # a killed run leaves no half image
            self.known.add(key)
        return key


def split_observations(observations: list[dict[str, Any]], image_keys: list[str]) -> list[dict[str, Any]]:
    """Each observation's text with the keys of its own images (the episode's images are in context order)."""
    out, start = [], 0
    for obs in observations:
        count = int(obs["num_images"])
        out.append({"text": obs["text"], "images": image_keys[start : start + count]})
        start += count
    if start != len(image_keys):
        raise ValueError(f"observations hold {start} images, the episode has {len(image_keys)}")
    return out


class TokenText:
    """Token id -> display text, decoded once per id (byte-level pieces become readable text)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, ids: list[int]) -> list[str]:
        """Display text of each id."""
        missing = sorted({i for i in ids if i not in self.cache})
        if missing:
            pieces = self.tokenizer.batch_decode([[i] for i in missing], skip_special_tokens=False)
            self.cache.update(zip(missing, pieces, strict=True))
        return [self.cache[i] for i in ids]


def episode_line(
    row: dict[str, Any],
    result: Any,
    step: int,
    phase: str,
    images: ImageStore,
    token_text: TokenText,
    advantages: list[float] | None,
) -> dict[str, Any]:
    """One ``episodes.jsonl`` record from a dataset row and its scored ``ragym.rl.core.rollout.EpisodeResult``."""
    output, extra = result.output, result.output.extra_fields
    keys = [images.put(_pil(as_pixels(image))) for image in (output.multi_modal_data or {}).get("images", [])]
    prompt_ids, response_ids = [int(i) for i in output.prompt_ids], [int(i) for i in output.response_ids]
    return {
        "v": TRACE_VERSION,
        "step": step,
        "phase": phase,
        "group": result.uid,
        "row_index": result.row_index,
        "data_source": str(row["data_source"]),
        "env_id": extra.get("env_id"),
        "ground_truth": row["reward_model"]["ground_truth"],
        "reward": result.reward,
        "terms": {
            k.removeprefix("reward/"): float(v) for k, v in result.score.items() if k.startswith("reward/")
        },
        "truncated": bool(extra["truncated"]),
        "turns": list(extra["turns"]),
        "events": list(extra["events"]),
        "observations": split_observations(extra.get("observations", []), keys)
        if "observations" in extra
        else [],
        "images": keys,
        "prompt_ids": prompt_ids,
        "response_ids": response_ids,
        "response_mask": [int(m) for m in output.response_mask],
        "advantages": advantages,
        "token_text": token_text(prompt_ids + response_ids),
        # Off-policy episodes (verl's async modes): the weight versions that generated it and how many updates
        # behind the trainer the oldest was (ragym.rl.off_policy.trajectory_staleness).
        **{key: extra[key] for key in OFF_POLICY_KEYS if key in extra},
    }


class ObservationLog(gymnasium.Wrapper):
    """Keeps every observation of the current episode, for traces of episodes run without the agent loop."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset and start a new log with the task observation."""
        obs, info = self.env.reset(**kwargs)
        self.observations = [obs]
        return obs, info

    def step(self, action: Any) -> tuple[Any, ...]:
        """Step and log the observation."""
        out = self.env.step(action)
        self.observations.append(out[0])
        return out


def _pil(image: Any) -> Image.Image:
    return image if isinstance(image, Image.Image) else Image.fromarray(image)


class TraceWriter:
    """Appends a bounded sample of each step's episodes to a trace folder."""

    def __init__(
        self, root: str | Path, tokenizer: Any, cfg: TraceConfig, keep_steps_up_to: int = -1
    ) -> None:
        """``keep_steps_up_to``: a resumed run keeps the records of steps up to its checkpoint and drops
        later ones (they are about to be redone); -1 starts empty. ``tokenizer``: None when no tokens are
        recorded (scripted rollouts)."""
        self.root, self.cfg = Path(root), cfg
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / MARKER).write_text(json.dumps({"version": TRACE_VERSION}))
        self.images = ImageStore(self.root / "images")
        self.token_text = TokenText(tokenizer)
        self.path = self.root / "episodes.jsonl"
        self.followed: set[int] = set()
        """Row indices recorded before: recorded again whenever they come back."""
        self.counts: dict[tuple[str, int], int] = {}
        kept = self._kept(keep_steps_up_to)
        self.path.write_text("".join(line + "\n" for line in kept))

    def _kept(self, keep_steps_up_to: int) -> list[str]:
        """Lines of an earlier run to keep; restores which questions are followed and each step's count."""
        if keep_steps_up_to < 0 or not self.path.is_file():
            return []
        kept, groups = [], set()
        for record in read_log(self.path):  # a last line the kill cut short is left out
            if record["step"] > keep_steps_up_to:
                continue
            kept.append(json.dumps(record, ensure_ascii=False))
            self.followed.add(record["row_index"])
            if (record["phase"], record["step"], record["group"]) not in groups:
                groups.add((record["phase"], record["step"], record["group"]))
                key = (record["phase"], record["step"])
                self.counts[key] = self.counts.get(key, 0) + 1
        return kept

    def choose_groups(self, phase: str, step: int, results: list[Any]) -> list[str]:
        """Group ids to record: followed questions first, then batch order, up to the per-step budget."""
        groups: dict[str, int] = {}
        for result in results:
            groups.setdefault(result.uid, result.row_index)
        budget = self.cfg.max_groups_per_step - self.counts.get((phase, step), 0)
        ordered = sorted(groups, key=lambda uid: groups[uid] not in self.followed)  # stable: batch order
        chosen = ordered[: max(0, budget)]
        self.counts[(phase, step)] = self.counts.get((phase, step), 0) + len(chosen)
        self.followed.update(groups[uid] for uid in chosen)
        return chosen

    def record(
        self, step: int, phase: str, rows: list[dict[str, Any]], results: list[Any], advantages: Any = None
    ) -> int:
        """Record the chosen groups of one rollout (``results[i]`` is an episode of ``rows[i // G]``);
        ``advantages``: the batch's [N, R] per-token advantages in ``results`` order. Returns episodes written."""
        if not results or self.cfg.max_groups_per_step <= 0:
            return 0
        if len(results) % len(rows):
            raise ValueError(f"{len(results)} episodes do not split evenly over {len(rows)} rows")
        per_row = len(results) // len(rows)
        chosen = set(self.choose_groups(phase, step, results))
        lines = []
        for i, result in enumerate(results):
            if result.uid not in chosen:
                continue
            num_response = len(result.output.response_ids)
            adv = None if advantages is None else [round(float(a), 5) for a in advantages[i, :num_response]]
            line = episode_line(rows[i // per_row], result, step, phase, self.images, self.token_text, adv)
            lines.append(json.dumps(line, ensure_ascii=False))
        with self.path.open("a") as f:
            f.write("".join(line + "\n" for line in lines))
        return len(lines)

    def record_scripted(
        self, row: dict[str, Any], episode: dict[str, Any], observations: list[dict[str, Any]], reward: float
    ) -> None:
        """One episode of a scripted policy (``ragym.envs.scripted.run_episode`` on an ``ObservationLog``-wrapped
        env): turns, events and every observation, scored by ``reward``; no tokens (there were none)."""
        index = int(row["extra_info"]["index"])
        shown = [
            {"text": o["text"], "images": [self.images.put(_pil(i)) for i in o["images"]]}
            for o in observations
        ]
        line = {
            "v": TRACE_VERSION,
            "step": 0,
            "phase": "rollout",
            "group": f"rollout-{index}",
            "row_index": index,
            "data_source": str(row["data_source"]),
            "env_id": row["extra_info"]["env_id"],
            "ground_truth": row["reward_model"]["ground_truth"],
            "reward": reward,
            "terms": {},
            "truncated": bool(episode["truncated"]),
            "turns": list(episode["turns"]),
            "events": list(episode["events"]),
            "observations": shown,
            "images": [k for o in shown for k in o["images"]],
        }
        with self.path.open("a") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
