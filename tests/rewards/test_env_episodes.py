"""Every env's scripted episodes score as recorded: the reward terms of its expert's episodes on its toy rows.

``env_episodes.json`` holds, per env, the digest of each episode's events and the scores of its shipped reward
recipe and of the generic terms (``outcome``, ``format``), written once from the code before the reward modules
moved (issue #50 item 4), so a refactor of ``rewards/`` that changes a value fails here. Each episode is also
scored cut by the length budget (an unseen last turn, as the agent loop records it), malformed and well formed.
``python -m tests.rewards.test_env_episodes`` rewrites the file: only for a deliberate change of a reward.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ragym.envs import events as ev
from ragym.envs.hooks import env_hooks, one_env_per_hooks
from ragym.envs.registry import make_env
from ragym.rewards.verl import compute_score

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("env_episodes.json")
ROWS_PER_ENV = 3
# The reward recipe each env's paper recipe trains with (recipes/rewards/); an env without one gets the generic terms.
SHIPPED = {"kbvqa": "mmagent_r2", "docmemo": "docmemo", "memora": "memora", "r3g": "r3g"}
GENERIC = {
    "terms": {
        "outcome": {"weight": 1.0},
        "format": {"weight": 1.0},
        "format_fraction": {"reward": "format", "weight": 0.5, "params": {"mode": "fraction"}},
    }
}
logger = logging.getLogger(__name__)


def scripted_episodes(env_id: str, folder: Path) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(row, episode) of the env's expert on its first toy training rows; the episode as the agent loop hands it."""
    hooks = env_hooks(env_id)
    assert hooks.toy_rows is not None and hooks.expert is not None
    hooks.toy_rows(folder)
    rows = pd.read_parquet(folder / "data" / "train.parquet").head(ROWS_PER_ENV)
    built: dict[
        tuple[str, str], Any
    ] = {}  # one env per (id, kwargs): a reset starts afresh, and builds are slow
    for _, row in rows.iterrows():
        info = row["extra_info"]
        key = (info["env_id"], info["env_kwargs"])
        if key not in built:
            built[key] = make_env(info["env_id"], **json.loads(info["env_kwargs"]))
        env = built[key]
        obs, out = env.reset(seed=0, options=json.loads(info["env_options"]))
        policy = hooks.expert(env, 0)
        policy.reset(obs)
        turns, done, truncated = [], False, False
        while not done:
            turns.append(policy.act(obs["text"]))
            obs, _, terminated, truncated, out = env.step(turns[-1])
            done = terminated or truncated
        yield row.to_dict(), {"turns": turns, "events": out["events"], "truncated": truncated}


def cut(episode: dict[str, Any], text: str) -> dict[str, Any]:
    """The episode with one more turn the env never saw, cut by the length budget as the agent loop records it."""
    turn = len(episode["turns"])
    events = [*episode["events"], ev.truncated(turn, "max_response_length")]
    return {"turns": [*episode["turns"], text], "events": events, "truncated": True}


def variants(episode: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The episode as played, and cut after a malformed and after a well-formed (its first) turn."""
    first = episode["turns"][0]
    return {
        "played": episode,
        "cut_malformed": cut(episode, first[: len(first) // 2]),
        "cut_formed": cut(episode, first),
    }


def score(row: dict[str, Any], episode: dict[str, Any], recipe: dict[str, Any] | str) -> dict[str, float]:
    """``compute_score`` of one episode, as verl's reward loop calls it (row's extra_info and the loop's fields)."""
    info = {**row["extra_info"], **episode, "env_id": row["extra_info"]["env_id"]}
    kwargs = (
        {"recipe_path": str(REPO / "recipes" / "rewards" / f"{recipe}.yaml")}
        if isinstance(recipe, str)
        else {"recipe": recipe}
    )
    return compute_score(row["data_source"], "", row["reward_model"]["ground_truth"], info, **kwargs)


def digest(events: list[dict[str, Any]]) -> str:
    """A short digest of an event stream (tells an env's change apart from a reward's)."""
    return hashlib.sha256(json.dumps(events, sort_keys=True).encode()).hexdigest()[:16]


def record(env_id: str) -> list[dict[str, Any]]:
    """The env's scripted episodes and their scores, as ``env_episodes.json`` holds them."""
    shipped = SHIPPED.get(env_hooks(env_id).name)
    records = []
    with tempfile.TemporaryDirectory() as folder:
        for row, episode in scripted_episodes(env_id, Path(folder)):
            scores = {}
            for name, variant in variants(episode).items():
                scores[name] = {"generic": score(row, variant, GENERIC)}
                if shipped is not None:
                    scores[name]["shipped"] = score(row, variant, shipped)
            records.append(
                {"events": digest(episode["events"]), "turns": len(episode["turns"]), "scores": scores}
            )
    return records


EXPECTED = json.loads(FIXTURE.read_text()) if FIXTURE.is_file() else {}


@pytest.mark.parametrize("env_id", one_env_per_hooks("expert"))
def test_scripted_episodes_score_as_recorded(env_id: str) -> None:
    assert env_id in EXPECTED, f"{env_id} has no recorded episodes: python -m tests.rewards.test_env_episodes"
    got = record(env_id)
    want = EXPECTED[env_id]
    assert [r["events"] for r in got] == [r["events"] for r in want], f"{env_id}: the env's events changed"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g["scores"] == w["scores"], f"{env_id} row {i}: scores changed"


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    recorded = {env_id: record(env_id) for env_id in one_env_per_hooks("expert")}
    FIXTURE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    logger.info("wrote %s: %s", FIXTURE, {k: len(v) for k, v in recorded.items()})
