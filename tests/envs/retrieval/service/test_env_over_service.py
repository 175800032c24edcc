"""KB-VQA over the retrieval service: same episodes as in process; a dead service is an observation and an
event, never a hang, and search works again once the service is back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ragym import envs
from ragym.envs.events import events_of
from ragym.envs.kbvqa.actions import SearchImage, SearchText, format_action
from ragym.envs.kbvqa.policies import SignaturePolicy
from ragym.envs.retrieval.service.app import RetrievalApp
from ragym.envs.retrieval.service.client import ServiceRetriever
from ragym.envs.scripted import run_episode
from ragym.envs.serving.catalog import CatalogSpec, load_catalog
from tests.envs.retrieval.service.helpers import free_port, running


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 30
    while not ServiceRetriever(url, "bm25").ready():
        assert time.monotonic() < deadline, "service never became ready"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def kb_service(tiny_kb: Path):
    with running(RetrievalApp(lambda: load_catalog(CatalogSpec(folders=(("kb-dir", str(tiny_kb)),))))) as url:
        _wait_ready(url)
        yield url


@pytest.mark.parametrize("source", ["precomputed", "live"])
def test_scripted_episodes_are_identical_over_the_service(
    kb_service: str, tiny_kb: Path, source: str
) -> None:
    runs = []
    for url in ("", kb_service):  # "" forces in-process search even if $RAGYM_RETRIEVAL_URL is set
        env = envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb), candidate_source=source, retrieval_url=url)
        policy = SignaturePolicy(env)
        runs.append([run_episode(env, policy, seed) for seed in range(6)])
    assert runs[0] == runs[1]
    assert any(events_of(ep["events"], "search_image") for ep in runs[1])


def test_search_text_over_the_service(kb_service: str, tiny_kb: Path) -> None:
    turn = format_action(SearchText(("first recorded",)))
    texts = []
    for url in ("", kb_service):
        env = envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb), retrieval_url=url)
        env.reset(seed=0)
        obs, *_, info = env.step(turn)
        texts.append((obs["text"], events_of(info["events"], "search_text")))
    assert texts[0] == texts[1] and texts[0][1][0]["num_passages"] > 0


def test_a_dead_service_is_an_observation_and_an_event_and_search_recovers(tiny_kb: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = envs.make_env(
        "KBVQA-v0", kb_dir=str(tiny_kb), retrieval_url=url, retrieval_timeout_s=0.5, retrieval_retries=1
    )
    env.reset(seed=1)
    start = time.monotonic()
    obs, reward, terminated, truncated, info = env.step(format_action(SearchImage(1)))
    assert time.monotonic() - start < 5
    assert "Retrieval is unavailable" in obs["text"] and len(obs["images"]) == 0
    assert not (terminated or truncated)
    [error] = events_of(info["events"], "retrieval_error")
    assert (error["retriever"], error["reason"], error["turn"]) == ("image", "connection", 0)
    assert not events_of(info["events"], "search_image")
    obs, *_, info = env.step(format_action(SearchText(("first recorded",))))
    assert [e["retriever"] for e in events_of(info["events"], "retrieval_error")] == ["image", "bm25"]

    with running(
        RetrievalApp(lambda: load_catalog(CatalogSpec(folders=(("kb-dir", str(tiny_kb)),)))), port=port
    ):
        _wait_ready(url)
        deadline = time.monotonic() + 15  # the shared breaker lets a probe through after its cool-down
        while True:
            obs, _, terminated, truncated, info = env.step(format_action(SearchImage(1)))
            if events_of(info["events"], "search_image") or terminated or truncated:
                break
            assert time.monotonic() < deadline, "search never recovered"
            time.sleep(0.5)
    assert events_of(info["events"], "search_image"), "the episode ended before the service came back"
    assert len(obs["images"]) == env.config.candidates_per_batch
