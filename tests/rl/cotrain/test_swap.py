"""In process: a swap reaches every env on the KB at its next search, and episodes record the version."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ragym.envs.events import events_of
from ragym.envs.kbvqa.harvest import harvest_episode
from ragym.envs.kbvqa.policies import OraclePolicy
from ragym.envs.registry import make_env, synthetic_data
from ragym.envs.retrieval.service.app import RetrievalApp
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.versions import load_query_encoder
from ragym.envs.scripted import run_episode
from ragym.rl.cotrain.config import CotrainConfig
from ragym.rl.cotrain.controller import CoTraining
from tests.envs.retrieval.service.helpers import running
from tests.rl.cotrain.helpers import options, tiny_rows, weak_encoder


def test_episodes_record_the_version_that_searched_and_a_swap_reaches_live_envs(tmp_path: Path) -> None:
    env = make_env("KBVQA-v0", kb_dir=synthetic_data("kbvqa", "tiny"), candidate_source="live")
    row = options(tiny_rows("train")[0])
    slot = env.unwrapped.kb.query_slot
    try:
        plain = run_episode(env, OraclePolicy(env), 0, row)["events"]
        assert {e["retriever_version"] for e in events_of(plain, "search_image")} == {None}
        slot.swap(load_query_encoder(weak_encoder(tmp_path / "weak")))
        other = make_env("KBVQA-v0", kb_dir=synthetic_data("kbvqa", "tiny"), candidate_source="live")
        for episode_env in (env, other):  # the env built before the swap and one built after it
            events = run_episode(episode_env, OraclePolicy(episode_env), 0, row)["events"]
            assert {e["retriever_version"] for e in events_of(events, "search_image")} == {"weak"}
        # the oracle verifies against the gold: its confirmations are positives, its rejections negatives
        harvest = harvest_episode(events, row)
        assert harvest.unverified == 0 and harvest.positives + harvest.negatives > 0
    finally:
        slot.swap(None)


def test_the_viewer_lists_the_retriever_versions_of_an_episode() -> None:
    from ragym.envs.kbvqa import events as kbvqa_ev
    from ragym.rl.view.data import summary

    events = [
        kbvqa_ev.search_image(0, 1, 0, ["a"], "a", 0, "v2"),
        kbvqa_ev.search_image(1, 1, 1, ["b"], "a", 1, "v1"),
        kbvqa_ev.search_image(2, 1, 2, ["c"], "a", 2),
    ]
    episode = {
        "id": "e",
        "source": "s",
        "step": 1,
        "phase": "train",
        "data_source": "d",
        "reward": 0.0,
        "terms": {},
        "turns": ["t"],
        "truncated": False,
        "images": [],
        "observations": [],
        "events": events,
        "task": {"observation": {"text": "q"}},
    }
    assert summary(episode, {})["retriever_versions"] == ["v1", "v2"]


def test_a_swap_some_service_replicas_did_not_take_is_warned_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Ray Serve deployment answers 504 when a replica did not confirm the version in time
    (``ragym.envs.serving.encoder_sync``): the run goes on, but says so, in the log and in a step metric."""
    posted = []

    async def one_of_two(name: str, path: object) -> tuple[int, dict[str, Any]]:
        posted.append((name, path))
        replicas = {"holding": 1, "live": 2, "errors": {}}
        return 504, {"error": "1 of 2 replicas hold weak after 60 s", "version": "weak", "replicas": replicas}

    service = RetrievalApp({}, ServiceConfig(gc_freeze=False))
    service.encoder_route = one_of_two
    cfg = CotrainConfig(enable=True, background=False)
    with running(service) as url:
        cotrain = CoTraining(cfg, tmp_path, tiny_rows("train"), tiny_rows("test"), None, service_url=url)
        try:
            with caplog.at_level(logging.WARNING, logger="ragym.rl.cotrain.controller"):
                cotrain.guard_and_swap(2, str(weak_encoder(tmp_path / "weak")))
        finally:
            cotrain.retriever.swap(None)
    assert posted == [("image", str((tmp_path / "weak").resolve()))]
    assert cotrain.counts["cotrain/swaps"] == 1 and cotrain.counts["cotrain/service_replicas_missing"] == 1
    assert "did not swap every replica" in caplog.text and "1 of 2 replicas hold weak" in caplog.text
