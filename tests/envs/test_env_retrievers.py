"""Every env takes ``(config=None, *, retriever=None, **overrides)`` and searches through the retriever passed in
(each env's ``search_probe`` hook says how to make it search); ``make_env`` resolves the retrieval service once per
process for the envs that search it."""

from __future__ import annotations

from typing import Any

import gymnasium
import pytest

from ragym import envs
from ragym.envs.hooks import hook
from ragym.envs.kbvqa.kb import KBRetrievers, load_kb
from ragym.envs.registry import make_env, searches_service, synthetic_data
from ragym.envs.retrieval.hits import NamedRetrievers
from ragym.envs.retrieval.service.client import ClientConfig, ServiceRetrievers, service_retrievers

URL = "http://127.0.0.1:9"  # nothing is ever sent: building a client connects to nothing


class Spy:
    """A retriever that records every query, then answers as ``inner`` does."""

    def __init__(self, inner: Any):
        self.inner, self.queries = inner, []

    def search(self, query: Any, k: int) -> list:
        self.queries.append(query)
        return self.inner.search(query, k)

    def batch_search(self, queries: list, k: int) -> list:
        self.queries += list(queries)
        return self.inner.batch_search(queries, k)


class SpySource:
    """A ``RetrieverSource`` that hands out ``Spy`` wrappers of ``inner``'s retrievers, one per name."""

    def __init__(self, inner: Any):
        self.inner, self.spies = inner, {}

    def retriever(self, name: str) -> Spy:
        return self.spies.setdefault(name, Spy(self.inner.retriever(name)))


def _episode(env: gymnasium.Env, turns: list[str]) -> list[tuple[str, list]]:
    obs, info = env.reset(seed=0)
    trace = [(obs["text"], info["events"])]
    for turn in turns:
        obs, _, _, _, info = env.step(turn)
        trace.append((obs["text"], info["events"]))
    return trace


@pytest.mark.parametrize("env_id", sorted(envs.registered_envs()))
def test_every_env_searches_through_the_retriever_passed_in(env_id: str) -> None:
    # An env without the hook fails here, with a line naming the env and where the hook goes.
    probe = hook(env_id, "search_probe", "the test that every env searches through the retriever passed in")
    turns, name = list(probe.turns), probe.name
    source = SpySource(probe.source())
    passed = _episode(gymnasium.make(env_id, retriever=source).unwrapped, turns)
    assert list(source.spies) == [name] and source.spies[name].queries, f"{env_id} did not search through it"
    # The same retrievers in process give the same episode: passing them in changes nothing else.
    assert passed == _episode(gymnasium.make(env_id).unwrapped, turns)


@pytest.mark.parametrize("env_id", sorted(envs.registered_envs()))
def test_every_env_builds_from_its_id_alone(env_id: str) -> None:
    env = gymnasium.make(env_id)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info["events"]


def test_the_edge_resolves_one_url_into_one_shared_client(monkeypatch) -> None:
    monkeypatch.setenv("RAGYM_RETRIEVAL_URL", URL)
    built = [make_env(env_id) for env_id in ("KBVQA-v0", "KBVQA-Demo-v0", "DocMemo-v0", "KBVQA-v0")]
    source = built[0].retrievers
    assert isinstance(source, ServiceRetrievers) and source.url == URL
    assert all(env.retrievers is source for env in built)  # one source, so one client and breaker per name
    assert built[0]._image_retriever is built[3]._image_retriever is source.retriever("candidates")
    assert source is service_retrievers(URL, ClientConfig())  # the defaults the rows' kwargs leave
    # A row's own settings are another client; envs that search no service get none.
    other = make_env("KBVQA-v0", retrieval_url=URL, retrieval_timeout_s=0.5, retrieval_retries=0)
    assert other.retrievers is not source and other.retrievers.config.timeout_s == 0.5
    assert {e for e in envs.registered_envs() if searches_service(e)} == {
        "KBVQA-v0",
        "KBVQA-Demo-v0",
        "DocMemo-v0",
    }
    assert make_env("MEMORA-v0").retrievers is None
    assert isinstance(make_env("R3G-v0").retrievers, NamedRetrievers)  # its own corpus, in process


def test_the_edge_refuses_settings_that_make_no_search_possible() -> None:
    with pytest.raises(ValueError, match="retrieval_timeout_s must be"):
        make_env("KBVQA-v0", retrieval_url=URL, retrieval_timeout_s=0.0)
    with pytest.raises(ValueError, match="retrieval_retries must be"):
        make_env("DocMemo-v0", retrieval_retries=-1)


def test_an_explicit_retriever_wins_and_unset_means_in_process(monkeypatch) -> None:
    mine = KBRetrievers(load_kb(synthetic_data("kbvqa", "tiny")))
    monkeypatch.setenv("RAGYM_RETRIEVAL_URL", URL)
    assert make_env("KBVQA-v0", retriever=mine).retrievers is mine
    monkeypatch.delenv("RAGYM_RETRIEVAL_URL")
    assert isinstance(make_env("KBVQA-v0").retrievers, KBRetrievers)


def test_an_empty_url_searches_in_process_even_with_the_variable_set(monkeypatch) -> None:
    monkeypatch.setenv("RAGYM_RETRIEVAL_URL", URL)
    assert isinstance(make_env("KBVQA-v0", retrieval_url="").retrievers, KBRetrievers)
    assert not isinstance(make_env("KBVQA-v0").retrievers, KBRetrievers)  # the variable alone: the service
