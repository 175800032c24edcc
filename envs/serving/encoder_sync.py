"""Encoder swaps under Ray Serve: a ``POST /encoder`` that reaches one replica reaches every replica.

One detached named Ray actor per Serve app (``EncoderVersions``, created by the first replica that asks) holds, per
retriever, the version the deployment serves (path, version name, and a token new with each publish) and which
replicas hold it. The replica that takes the POST swaps itself (``RetrievalApp.swap_encoder``: load, drain the
requests in flight, swap), publishes the version, and waits up to ``wait_s`` until as many replicas hold it as Serve
runs (``serve.status``). Every replica asks the actor each ``poll_s`` and applies a version it does not hold through
the same ``swap_encoder``, so no request on any replica mixes versions; a replica that starts later (a restart, a
scale-up) applies the current versions before Serve routes a request to it.

The answer is ``{"version", "previous", "replicas": {"holding", "live", "errors"}}``: 200 once every running replica
holds the version; 504 when some have not confirmed within ``wait_s`` (they apply it at a later poll), 502 when some
failed to load it (``errors``, by replica; they try again each poll); 409 when another swap of the same retriever
replaced it meanwhile. The actor is detached, so the versions live as long as the Ray cluster: a redeploy of the
app starts its replicas on the last version swapped in.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ragym.envs.retrieval.service.app import RetrievalApp, Served
from ragym.envs.retrieval.service.config import ServiceConfig

log = logging.getLogger(__name__)

NAMESPACE = "ragym"
"""Ray namespace of the registry actors (``encoder-versions-<app>``)."""
STALE_AFTER_POLLS = 20
"""A replica not heard from for this many poll intervals no longer counts as holding anything (it died)."""


@dataclass(frozen=True)
class SyncSettings:
    """How a swap spreads over the replicas."""

    wait_s: float = 60.0
    """How long the replica that takes ``POST /encoder`` waits for every running replica to hold the version."""
    poll_s: float = 0.5
    """How often each replica asks the registry for a version it does not hold (and the waiting replica counts)."""

    def __post_init__(self) -> None:
        if self.wait_s < 0 or self.poll_s <= 0:
            raise ValueError(f"wait_s must be >= 0 and poll_s > 0, got {self.wait_s} and {self.poll_s}")


@dataclass(frozen=True)
class Published:
    """The version a deployment serves for one retriever."""

    path: str
    """The version folder (``ragym.envs.retrieval.versions``), readable on every replica's node."""
    version: str
    """Its name (``encoder.json``)."""
    token: str
    """New with each publish: a replica holds the version once it applied this token."""


@dataclass(frozen=True)
class Holding:
    """Where a published version stands."""

    replicas: tuple[str, ...]
    """Replicas heard from lately that hold it."""
    errors: dict[str, str]
    """Replicas that could not load it, and why."""
    current: str | None
    """The retriever's token now: another swap may have replaced the one asked about."""


class EncoderVersions:
    """The registry, run as a detached Ray actor: per retriever the published version, per replica what it holds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.published: dict[str, Published] = {}
        # replica -> retriever -> (token it applied or tried, why it could not load it or None)
        self.held: dict[str, dict[str, tuple[str, str | None]]] = {}
        self.seen: dict[str, float] = {}  # replica -> when it last asked or reported

    def publish(self, retriever: str, path: str, version: str) -> Published:
        """Make ``path`` the version every replica serves for ``retriever``."""
        self.published[retriever] = Published(path, version, uuid.uuid4().hex)
        return self.published[retriever]

    def poll(self, replica: str) -> dict[str, Published]:
        """The published versions, by retriever (a replica that asks is alive)."""
        self.seen[replica] = self.clock()
        return dict(self.published)

    def report(self, replica: str, retriever: str, token: str, error: str | None) -> None:
        """``replica`` applied ``token`` (``error`` None) or could not load it."""
        self.seen[replica] = self.clock()
        self.held.setdefault(replica, {})[retriever] = (token, error)

    def holding(self, retriever: str, token: str, fresh_s: float) -> Holding:
        """Which replicas heard from in the last ``fresh_s`` hold ``token``, and which failed to load it."""
        now, replicas, errors = self.clock(), [], {}
        for replica, held in self.held.items():
            if now - self.seen.get(replica, -math.inf) > fresh_s or held.get(retriever, (None,))[0] != token:
                continue
            error = held[retriever][1]
            if error is None:
                replicas.append(replica)
            else:
                errors[replica] = error
        current = self.published.get(retriever)
        return Holding(tuple(sorted(replicas)), errors, current and current.token)


class ReplicaSync:
    """One replica's side: adopt the published versions at start, poll for new ones, and swap every replica when
    this one takes ``POST /encoder`` (it becomes the app's ``encoder_route``)."""

    def __init__(
        self,
        app: RetrievalApp,
        replica: str,
        registry: Callable[[], Any],
        live: Callable[[], Awaitable[int]],
        settings: SyncSettings,
    ) -> None:
        self.app, self.replica, self.settings = app, replica, settings
        # the registry actor's handle, resolved on first use and again after a failed call (the actor may be gone)
        self._resolve, self._registry = registry, None
        self._live = live
        self.held: dict[str, str] = {}
        """Retriever -> token of the version this replica serves."""
        self._logged: set[str] = set()  # tokens whose load failure was logged
        self._lock = asyncio.Lock()  # a swap taken here and the poller's applies run one at a time
        self._task: asyncio.Task | None = None  # held: the event loop keeps only a weak reference to a task
        app.encoder_route = self.swap_everywhere

    @property
    def fresh_s(self) -> float:
        """How recently a replica must have been heard from to count."""
        return STALE_AFTER_POLLS * self.settings.poll_s

    async def adopt(self) -> None:
        """Apply the deployment's versions before Serve routes here; a replica that cannot load one does not start
        (it would serve the encoder a swap replaced)."""
        async with self._lock:
            errors = await self._apply_published()
        if errors:
            raise RuntimeError(
                f"replica {self.replica} cannot load the deployment's query encoders: {errors}"
            )

    def start(self) -> None:
        """Poll the registry every ``poll_s`` on the running event loop (the one requests run on)."""
        self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    async def swap_everywhere(self, retriever: str, path: object) -> tuple[int, dict[str, Any]]:
        """``POST /encoder``: swap here, publish, wait until every running replica holds the version."""
        async with self._lock:
            result = await self.app.swap_encoder(retriever, path)  # a refused swap publishes nothing
            published: Published = await self._call(
                lambda r: r.publish.remote(retriever, str(path), result["version"])
            )
            self.held[retriever] = published.token
            await self._report(retriever, published.token, None)
        holding, live = await self._wait(retriever, published.token)
        body = {
            **result,
            "replicas": {"holding": len(holding.replicas), "live": live, "errors": holding.errors},
        }
        if holding.current != published.token:
            return 409, {
                "error": f"another swap of {retriever!r} replaced {result['version']} while it spread"
            }
        if len(holding.replicas) >= live:
            return 200, body
        message = f"{len(holding.replicas)} of {live} replicas hold {result['version']} after {self.settings.wait_s:g} s"
        if holding.errors:
            return 502, {"error": f"{message}; could not load it: {holding.errors}", **body}
        return 504, {"error": f"{message}; the others apply it when they next poll", **body}

    async def _wait(self, retriever: str, token: str) -> tuple[Holding, int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.wait_s
        while True:
            holding: Holding = await self._call(lambda r: r.holding.remote(retriever, token, self.fresh_s))
            live = await self._live()
            if holding.current != token or len(holding.replicas) >= live or loop.time() >= deadline:
                return holding, live
            await asyncio.sleep(self.settings.poll_s)

    async def _poll_forever(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.settings.poll_s)
            try:
                async with self._lock:
                    await self._apply_published()
            except Exception as error:
                # the registry unreachable: keep serving what is held, ask again at the next poll
                if not failing:
                    log.warning("replica %s: encoder versions unavailable: %r", self.replica, error)
                failing = True
            else:
                failing = False

    async def _apply_published(self) -> dict[str, str]:
        """Apply every published version this replica does not hold (the lock held); load errors by retriever."""
        published: dict[str, Published] = await self._call(lambda r: r.poll.remote(self.replica))
        errors = {}
        for retriever, version in published.items():
            if self.held.get(retriever) == version.token:
                continue
            try:
                await self.app.swap_encoder(retriever, version.path)
            except ValueError as error:  # BadRequest (cannot load, unknown retriever) or a dimension mismatch
                errors[retriever] = str(error)
                if version.token not in self._logged:
                    self._logged.add(version.token)
                    log.error("replica %s cannot apply %s: %s", self.replica, version.version, error)
                await self._report(retriever, version.token, str(error))
                continue
            self.held[retriever] = version.token
            await self._report(retriever, version.token, None)
        return errors

    async def _report(self, retriever: str, token: str, error: str | None) -> None:
        await self._call(lambda r: r.report.remote(self.replica, retriever, token, error))

    async def _call(self, method: Callable[[Any], Any]) -> Any:
        """``method(actor handle)``'s result (an awaitable ``ObjectRef``); a failed call drops the handle."""
        if self._registry is None:
            self._registry = await asyncio.to_thread(self._resolve)
        try:
            return await method(self._registry)
        except Exception:
            self._registry = None
            raise


def registry_actor(app_name: str) -> Any:
    """The app's ``EncoderVersions`` actor, created detached by the first replica that asks."""
    import ray

    actor = ray.remote(EncoderVersions).options(
        name=f"encoder-versions-{app_name}",
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
    )
    return actor.remote()


def running_replicas(app_name: str, deployment: str) -> int:
    """Replicas of the deployment Serve runs now (``serve.status``; blocking, so called in a thread)."""
    from ray import serve

    states = serve.status().applications[app_name].deployments[deployment].replica_states
    return sum(n for state, n in states.items() if state == "RUNNING")


def serve_replica_sync(
    retrievers: dict[str, Served], config: ServiceConfig, settings: SyncSettings
) -> ReplicaSync:
    """The app of the Serve replica this runs in, with its sync (the replica's id names it in the registry and in
    every answer's ``x-ragym-replica`` header)."""
    from ray import serve

    context = serve.get_replica_context()
    return ReplicaSync(
        RetrievalApp(retrievers, config, replica=context.replica_tag),
        context.replica_tag,
        lambda: registry_actor(context.app_name),
        lambda: asyncio.to_thread(running_replicas, context.app_name, context.deployment),
        settings,
    )
