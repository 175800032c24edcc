"""An encoder swap spread over replicas (``ragym.envs.serving.encoder_sync``), without Ray: the replicas are apps in one
event loop and the registry actor is a plain ``EncoderVersions`` behind a fake handle.

``tests/envs/serving/test_ray_serve.py`` runs the same code on a Ray Serve deployment of 2 replicas.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest

from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.client import (
    ClientConfig,
    EncoderSwapIncomplete,
    RetrievalUnavailable,
    ServiceRetriever,
)
from ragym.envs.retrieval.service.config import ServiceConfig
from ragym.envs.retrieval.versions import (
    VERSION_KEY,
    EncoderSlot,
    QueryEncoder,
    VersionedRetriever,
    save_query_encoder,
)
from ragym.envs.serving.encoder_sync import EncoderVersions, ReplicaSync, SyncSettings
from tests.envs.retrieval.service.helpers import random_faiss, running

DIM = 16
FAST = SyncSettings(wait_s=5.0, poll_s=0.01)


class FakeActor:
    """A Ray actor handle over a plain object: ``actor.method.remote(*args)`` is awaitable, as an ``ObjectRef`` is."""

    def __init__(self, target: Any):
        self.target = target

    def __getattr__(self, name: str) -> SimpleNamespace:
        method = getattr(self.target, name)

        async def remote(*args: Any) -> Any:
            await asyncio.sleep(0)  # another task may run between the call and its answer, as with Ray
            return method(*args)

        return SimpleNamespace(remote=remote)


class Deployment:
    """Replicas sharing one registry; ``live`` counts those added (Serve's RUNNING replicas)."""

    def __init__(self, settings: SyncSettings = FAST):
        self.registry, self.settings = EncoderVersions(), settings
        self.replicas: list[ReplicaSync] = []

    async def add(self, name: str, versioned: bool = True, poll: bool = True) -> ReplicaSync:
        """A replica started as Serve starts one: loaded, the published versions adopted, then polling."""
        base, _ = random_faiss(200, DIM)
        retriever = VersionedRetriever(base, EncoderSlot()) if versioned else base
        config = ServiceConfig(cache_size=0, gc_freeze=False)
        app = RetrievalApp({"image": Served(retriever, "vector", DIM)}, config, replica=name)
        sync = ReplicaSync(app, name, lambda: FakeActor(self.registry), self.live, self.settings)
        await app.loaded()
        await sync.adopt()
        if poll:
            sync.start()
        self.replicas.append(sync)
        return sync

    async def live(self) -> int:
        return len(self.replicas)


def version(root: Path, name: str, seed: int = 0) -> str:
    """A query-encoder version folder."""
    rng = np.random.default_rng(seed)
    matrix = np.eye(DIM, dtype=np.float32) + 0.3 * rng.standard_normal((DIM, DIM)).astype(np.float32)
    return str(save_query_encoder(QueryEncoder(name, matrix), root / name))


async def searched_versions(sync: ReplicaSync) -> set[str | None]:
    """The versions a search on this replica's ``image`` retriever reports on its hits."""
    query = np.ones(DIM, dtype=np.float32)
    [encoded] = await sync.app.search("image", [query], 3)
    return {hit["payload"].get(VERSION_KEY) for hit in orjson.loads(encoded)}


def test_the_registry_counts_fresh_replicas_that_hold_the_token() -> None:
    now = [0.0]
    registry = EncoderVersions(clock=lambda: now[0])
    first = registry.publish("image", "/v/1", "v1")
    assert registry.poll("a") == {"image": first}
    registry.report("a", "image", first.token, None)
    registry.report("b", "image", first.token, "cannot load /v/1")
    registry.report("c", "image", "an older token", None)
    holding = registry.holding("image", first.token, fresh_s=5.0)
    assert (holding.replicas, holding.errors, holding.current) == (
        ("a",),
        {"b": "cannot load /v/1"},
        first.token,
    )
    # a replica not heard from within fresh_s has died: what it held no longer counts
    now[0] = 6.0
    registry.poll("b")
    assert registry.holding("image", first.token, fresh_s=5.0).replicas == ()
    # a later publish of the same retriever is a new token, even for the same folder
    second = registry.publish("image", "/v/1", "v1")
    assert second.token != first.token and registry.holding("image", first.token, 5.0).current == second.token


def test_a_swap_posted_to_one_replica_reaches_every_replica(tmp_path: Path) -> None:
    async def scenario() -> None:
        deployment = Deployment()
        a, b, c = [await deployment.add(name) for name in "abc"]
        status, body = await a.app.encoder_route("image", version(tmp_path, "v1"))
        assert status == 200, body
        assert body["version"] == "v1" and body["previous"] is None
        assert body["replicas"] == {"holding": 3, "live": 3, "errors": {}}
        for sync in (a, b, c):
            assert await searched_versions(sync) == {"v1"}
        # a replica that starts after the swap serves the version before any request reaches it
        late = await deployment.add("late", poll=False)
        assert late.app.retrievers["image"].retriever.version == "v1"

    asyncio.run(scenario())


def test_a_replica_that_does_not_confirm_makes_the_swap_answer_504(tmp_path: Path) -> None:
    async def scenario() -> None:
        deployment = Deployment(SyncSettings(wait_s=0.2, poll_s=0.01))
        a = await deployment.add("a")
        stalled = await deployment.add("stalled", poll=False)  # its poller never runs
        status, body = await a.app.encoder_route("image", version(tmp_path, "v1"))
        assert status == 504 and body["replicas"] == {"holding": 1, "live": 2, "errors": {}}, body
        assert "1 of 2 replicas hold v1 after 0.2 s" in body["error"]
        assert await searched_versions(stalled) == {None} and await searched_versions(a) == {"v1"}
        stalled.start()  # once it polls it applies the version
        for _ in range(200):
            if stalled.app.retrievers["image"].retriever.version == "v1":
                break
            await asyncio.sleep(0.01)
        assert await searched_versions(stalled) == {"v1"}

    asyncio.run(scenario())


def test_a_replica_that_cannot_load_the_version_makes_the_swap_answer_502(tmp_path: Path) -> None:
    async def scenario() -> None:
        deployment = Deployment(SyncSettings(wait_s=0.2, poll_s=0.01))
        a = await deployment.add("a")
        await deployment.add("plain", versioned=False)  # serves "image" with no query-encoder slot
        status, body = await a.app.encoder_route("image", version(tmp_path, "v1"))
        assert status == 502 and body["replicas"]["holding"] == 1, body
        assert list(body["replicas"]["errors"]) == ["plain"] and "takes no query encoder" in body["error"]

    asyncio.run(scenario())


def test_a_late_replica_that_cannot_load_the_version_does_not_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        deployment = Deployment()
        a = await deployment.add("a")
        folder = version(tmp_path, "v1")
        assert (await a.app.encoder_route("image", folder))[0] == 200
        shutil.rmtree(folder)
        with pytest.raises(RuntimeError, match="cannot load the deployment's query encoders"):
            await deployment.add("late")

    asyncio.run(scenario())


def test_a_swap_replaced_while_it_spread_answers_409(tmp_path: Path) -> None:
    async def scenario() -> None:
        deployment = Deployment(SyncSettings(wait_s=0.2, poll_s=0.01))
        a = await deployment.add("a")
        await deployment.add("stalled", poll=False)
        later = version(tmp_path, "v2", seed=1)

        async def live_then_replaced() -> int:  # another replica publishes v2 while a waits for v1
            deployment.registry.publish("image", later, "v2")
            return 2

        a._live = live_then_replaced
        status, body = await a.app.encoder_route("image", version(tmp_path, "v1"))
        assert status == 409 and "replaced v1" in body["error"], body

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("status", "replicas", "raised"),
    [
        (200, {"holding": 2, "live": 2, "errors": {}}, None),
        (504, {"holding": 1, "live": 2, "errors": {}}, EncoderSwapIncomplete),
        (502, {"holding": 1, "live": 2, "errors": {"b": "cannot load"}}, EncoderSwapIncomplete),
    ],
)
def test_the_client_raises_on_a_swap_some_replicas_did_not_take(
    status: int, replicas: dict[str, Any], raised: type[Exception] | None
) -> None:
    answer = {"version": "v1", "previous": None, "replicas": replicas}

    async def route(name: str, path: object) -> tuple[int, dict[str, Any]]:
        return status, answer if status == 200 else {"error": "not every replica", **answer}

    base, _ = random_faiss(50, DIM)
    app = RetrievalApp({"image": Served(base, "vector", DIM)}, ServiceConfig(gc_freeze=False), replica="r0")
    app.encoder_route = route
    with running(app) as url:
        client = ServiceRetriever(url, "image", ClientConfig(swap_timeout_s=5.0))
        if raised is None:
            assert client.swap_encoder("/v/1") == answer
            return
        with pytest.raises(raised, match="not every replica") as caught:
            client.swap_encoder("/v/1")
    assert isinstance(caught.value, EncoderSwapIncomplete)
    assert (caught.value.holding, caught.value.live) == (1, 2)


@pytest.mark.parametrize("answer", [{"error": "<html>proxy page</html>"}, {"ok": True}, ["v1"]])
def test_the_client_refuses_a_swap_answer_without_a_version(answer: Any) -> None:
    """A 200 that is not the route's answer (a proxy's page, another route's) is not a swap that happened."""

    async def route(name: str, path: object) -> tuple[int, Any]:
        return 200, answer

    base, _ = random_faiss(50, DIM)
    app = RetrievalApp({"image": Served(base, "vector", DIM)}, ServiceConfig(gc_freeze=False), replica="r0")
    app.encoder_route = route
    with running(app) as url:
        client = ServiceRetriever(url, "image", ClientConfig(swap_timeout_s=5.0))
        with pytest.raises(RetrievalUnavailable, match="without a version") as caught:
            client.swap_encoder("/v/1")
    assert caught.value.reason == "server_error"
