"""The viewer's data layer: episodes from a run, eval output or demo folder, as list rows and turn-by-turn views.

Everything here reads events and observations generically: no field of any one env is named. Event
filters come from each event's categorical fields (booleans and short snake-case codes), gold marks from
its ``gold_*`` fields, observation layout from the ``<image>`` markers every env writes.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.files import read_jsonl, read_log
from ragym.rl.errors import UsageError
from ragym.rl.view.tokens import token_issues, token_spans
from ragym.rl.view.trace import MARKER

CODE = re.compile(r"^[a-z][a-z0-9_]*$")
"""A string field value that is a code (``reject``, ``no_action``), not free text or an id."""
MAX_CODES = 12
"""A string field with more distinct codes than this is not offered as a filter."""
MAX_DEPTH = 3
"""Folder levels searched below the given path for trace folders."""


@dataclass
class Corpus:
    """Every loaded episode (full records, ``id`` added) and where each image file lies."""

    episodes: list[dict[str, Any]]
    images: dict[str, Path] = field(default_factory=dict)
    """Image key -> PNG file."""
    title: str = ""
    guards: list[dict[str, Any]] = field(default_factory=list)
    """Collapse-guard firings of the run (``ragym.rl.guards``: its ``guards.jsonl``), shown above the list."""
    _fields: dict[str, list[str]] | None = None

    @property
    def fields(self) -> dict[str, list[str]]:
        """``categorical_fields`` of every episode, computed once."""
        if self._fields is None:
            self._fields = categorical_fields(self.episodes)
        return self._fields

    def by_id(self, episode_id: str) -> dict[str, Any]:
        """The episode with this id; an unknown id is an error naming it."""
        number = episode_id[1:]
        if episode_id[:1] == "e" and number.isdigit() and int(number) < len(self.episodes):
            return self.episodes[int(number)]  # ids are ``e<position>`` (``load`` numbers them)
        raise KeyError(f"no episode {episode_id!r}")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in read_jsonl(path)]


def find_traces(root: Path) -> list[Path]:
    """Trace folders at ``root`` or up to ``MAX_DEPTH`` levels below it, in path order."""
    found = [root] if (root / MARKER).is_file() else []
    for depth in range(1, MAX_DEPTH + 1):
        found += sorted(p.parent for p in root.glob("/".join(["*"] * depth) + "/" + MARKER))
    return found


def _from_rollouts(path: Path) -> list[dict[str, Any]]:
    """Episodes of a ``rollouts.jsonl`` (``ragym.rewards.episode.Episode`` lines), with ``ragym eval``'s scores
    from the ``episodes.jsonl`` beside it (same order) when present: no tokens, observations or images."""
    rollouts = _jsonl(path)
    has_scores = path.with_name("episodes.jsonl").is_file()
    scores = _jsonl(path.with_name("episodes.jsonl")) if has_scores else []
    if has_scores and len(scores) != len(rollouts):
        raise UsageError(f"{path} has {len(rollouts)} episodes, episodes.jsonl beside it {len(scores)}")
    out = []
    for i, episode in enumerate(rollouts):
        if "turns" not in episode or "events" not in episode:
            raise UsageError(
                f"{path}:{i + 1}: not an episode (needs turns and events; has {sorted(episode)})"
            )
        score = scores[i] if scores else {}
        reward = score.get("correct")
        out.append(
            {
                "step": 0,
                "phase": "eval",
                "group": None,
                "data_source": episode.get("data_source", ""),
                "row_index": score.get("index", episode.get("extra", {}).get("index")),
                "env_id": None,
                "ground_truth": episode.get("ground_truth"),
                "reward": reward,
                "terms": {} if reward is None else {"outcome": reward},
                "truncated": bool(episode.get("truncated", False)),
                "turns": episode["turns"],
                "events": episode["events"],
                "observations": [],
                "images": [],
            }
        )
    return out


def load(path: str | Path) -> Corpus:
    """Episodes under ``path``: a trace folder, a run / eval / demo folder holding trace folders, a trace
    ``episodes.jsonl`` or an eval ``rollouts.jsonl`` (a folder without traces falls back to its rollouts)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    episodes: list[dict[str, Any]] = []
    images: dict[str, Path] = {}
    if path.is_dir():
        traces = find_traces(path)
        for trace in traces:
            label = str(trace.relative_to(path)) if trace != path else trace.name
            for record in read_log(trace / "episodes.jsonl") if (trace / "episodes.jsonl").is_file() else []:
                episodes.append({**record, "source": label})
            images.update({p.stem: p for p in (trace / "images").glob("*.png")})
        if not traces and (path / "rollouts.jsonl").is_file():
            episodes = [{**e, "source": path.name} for e in _from_rollouts(path / "rollouts.jsonl")]
        elif not traces:
            raise UsageError(f"{path} holds no trace folder ({MARKER}) and no rollouts.jsonl")
    elif path.parent.joinpath(MARKER).is_file():
        episodes = [{**r, "source": path.parent.name} for r in read_log(path)]
        images = {p.stem: p for p in (path.parent / "images").glob("*.png")}
    else:
        episodes = [{**e, "source": path.parent.name} for e in _from_rollouts(path)]
    for number, episode in enumerate(episodes):
        episode["id"] = f"e{number}"
    return Corpus(episodes, images, title=str(path), guards=_guard_firings(path))


def _guard_firings(path: Path) -> list[dict[str, Any]]:
    """The firings in the run folder that holds ``path`` (the folder itself, or a trace folder's parent)."""
    from ragym.rl.guards import read_firings

    run = path if path.is_dir() else path.parent
    for folder in (run, run.parent):
        firings = read_firings(folder)
        if firings:
            return firings
    return []


# ----- list rows ------------------------------------------------------------------------------------
def categorical_fields(episodes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per event type, the fields worth filtering on: booleans, and codes with few distinct values."""
    values: dict[tuple[str, str], set[Any]] = {}
    for episode in episodes:
        for event in episode["events"]:
            for key, value in event.items():
                if key not in ("type", "turn"):
                    values.setdefault((event["type"], key), set()).add(
                        value if isinstance(value, (bool, str)) else None
                    )
    out: dict[str, list[str]] = {}
    for (kind, key), seen in sorted(values.items()):
        flags = all(isinstance(v, bool) for v in seen)
        codes = all(isinstance(v, str) and CODE.match(v) for v in seen) and len(seen) <= MAX_CODES
        if flags or codes:
            out.setdefault(kind, []).append(key)
    return out


def _value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def event_tags(event: dict[str, Any], fields: dict[str, list[str]]) -> list[str]:
    """Filter tags of one event: its type, type + each categorical field, and its full categorical signature.

    >>> event_tags({"type": "verification", "turn": 2, "decision": "reject", "gold_in_batch": True},
    ...            {"verification": ["decision", "gold_in_batch"]})
    ['verification', 'verification decision=reject', 'verification gold_in_batch=true', 'verification decision=reject gold_in_batch=true']
    """
    kind = event["type"]
    parts = [f"{key}={_value(event[key])}" for key in fields.get(kind, []) if key in event]
    tags = [kind] + [f"{kind} {part}" for part in parts]
    return tags + ([f"{kind} {' '.join(parts)}"] if len(parts) > 1 else [])


def question_key(episode: dict[str, Any]) -> str:
    """What identifies a question across steps: its data source and row index (or its task text)."""
    if episode.get("row_index") is not None:
        return f"{episode['data_source']}#{episode['row_index']}"
    task = episode["observations"][0]["text"] if episode["observations"] else json.dumps(episode["turns"][:1])
    return f"{episode['data_source']}:{zlib.crc32(task.encode()):08x}"  # stable across processes


def summary(episode: dict[str, Any], fields: dict[str, list[str]]) -> dict[str, Any]:
    """One row of the episode list."""
    events = episode["events"]
    mask, adv = episode.get("response_mask"), episode.get("advantages")
    generated = [a for a, m in zip(adv or [], mask or [], strict=False) if m]
    return {
        "id": episode["id"],
        "source": episode["source"],
        "step": episode["step"],
        "phase": episode["phase"],
        "data_source": episode["data_source"],
        "env_id": episode.get("env_id"),
        "question": question_key(episode),
        "group": episode.get("group"),
        "reward": episode["reward"],
        "terms": episode["terms"],
        "num_turns": len(episode["turns"]),
        "actions": [e["kind"] for e in events if e["type"] == "action" and "kind" in e],
        "format_errors": sum(e["type"] == "format_error" for e in events),
        "truncated": bool(episode["truncated"]),
        "tags": sorted({tag for e in events for tag in event_tags(e, fields)}),
        "num_tokens": len(episode.get("response_ids") or []),
        "num_images": len(episode["images"]),
        "advantage": sum(generated) / len(generated) if generated else None,
        "token_issues": token_issues(episode),
        # verl trainer modes: the weight versions that generated it, and how many updates old it was trained
        "weight_versions": episode.get("weight_versions"),
        "staleness": episode.get("staleness"),
        # retriever co-training: the query-encoder versions its searches went through (ragym.envs.retrieval.versions)
        "retriever_versions": sorted({e["retriever_version"] for e in events if e.get("retriever_version")}),
    }


def index(corpus: Corpus) -> dict[str, Any]:
    """What the list page needs: one row per episode and the filter choices."""
    rows = [summary(e, corpus.fields) for e in corpus.episodes]
    tags = Counter(tag for row in rows for tag in row["tags"])
    terms = sorted({t for row in rows for t in row["terms"]})
    return {
        "title": corpus.title,
        "episodes": rows,
        "tags": sorted(tags.items()),
        "terms": terms,
        "guards": [g["message"] for g in corpus.guards],
    }


# ----- one episode ----------------------------------------------------------------------------------
def segments(text: str, image_keys: list[str]) -> list[dict[str, str]]:
    """An observation as text and image pieces in reading order, as ``observation_message`` lays it out
    for the model: images at the ``<image>`` markers, or first when the text has none."""
    pieces = text.split(IMAGE_PLACEHOLDER)
    if len(pieces) == 1:
        pieces = [""] * len(image_keys) + pieces
    elif len(pieces) - 1 != len(image_keys):
        raise ValueError(
            f"observation has {len(pieces) - 1} {IMAGE_PLACEHOLDER} markers, {len(image_keys)} images"
        )
    out: list[dict[str, str]] = []
    for i, piece in enumerate(pieces):
        if piece:
            out.append({"text": piece})
        if i < len(image_keys):
            out.append({"image": image_keys[i]})
    return out


def gold_values(event: dict[str, Any]) -> list[Any]:
    """Values of the event's ``gold_*`` fields (ids, or lists of them; not flags such as ``gold_in_batch``):
    the page marks them wherever they appear in the event."""
    values: list[Any] = []
    for key, value in event.items():
        if key.startswith("gold_"):
            values += [v for v in (value if isinstance(value, list) else [value]) if _is_id(v)]
    return values


def _decoded(value: Any) -> Any:
    """A row's ground truth is the JSON string of the annotation: shown decoded when it parses."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def episode_view(corpus: Corpus, episode_id: str) -> dict[str, Any]:
    """One episode turn by turn: each turn's policy text, events (gold values listed) and the observation
    it got back; the task observation and reset events first; the token spans when tokens were recorded."""
    episode = corpus.by_id(episode_id)
    observations = [segments(o["text"], o["images"]) for o in episode["observations"]]
    events = [{**e, "_gold": gold_values(e)} for e in episode["events"]]
    turns = []
    for turn, text in enumerate(episode["turns"]):
        turns.append(
            {
                "turn": turn,
                "text": text,
                "events": [e for e in events if e["turn"] == turn],
                "observation": observations[turn + 1] if turn + 1 < len(observations) else None,
            }
        )
    late = [e for e in events if e["turn"] >= len(turns)]
    if late and turns:
        turns[-1]["events"] += late  # a loop's truncation after the last turn belongs to it
    return {
        "summary": summary(episode, corpus.fields),
        "ground_truth": _decoded(episode.get("ground_truth")),
        "task": {
            "observation": observations[0] if observations else None,
            "events": [e for e in events if e["turn"] < 0],
        },
        "turns": turns,
        "spans": token_spans(episode)
        if episode.get("response_ids") is not None and "token_text" in episode
        else None,
    }
