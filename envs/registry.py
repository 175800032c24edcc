"""The ragym environment registry: one name per env class, registered with gymnasium too, and ``make_env``,
the edge that builds envs and resolves the retrieval service they search through."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import typing
from typing import Any

import gymnasium

from ragym.envs.hooks import load_object, register_hooks
from ragym.envs.retrieval.hits import RetrieverSource
from ragym.envs.retrieval.service.client import TOKEN_ENV, URL_ENV, ClientConfig, service_retrievers

_ENVS: dict[str, str] = {}
_SERVICE_ENVS: set[str] = set()
_SHARED_STATE: dict[str, str] = {}

SERVICE_KWARGS = ("retrieval_url", "retrieval_timeout_s", "retrieval_retries")
"""Env kwargs ``make_env`` takes for the retrieval service (rows and recipes name them beside the config's):
its base URL (None or absent: ``$RAGYM_RETRIEVAL_URL``, in process when that is unset too; "": in process),
the per-attempt timeout of a search (10 s), and retries of a failed search before it counts as unavailable (2)."""


def register_env(
    env_id: str,
    entry_point: str,
    *,
    searches_service: bool = False,
    shared_state_kwarg: str | None = None,
    hooks: str | None = None,
    **kwargs: Any,
) -> None:
    """Register ``env_id`` (versioned, e.g. ``KBVQA-v0``) with ragym and gymnasium; duplicates are an error.

    ``searches_service``: the env's retrievers can be the retrieval service's (``ragym serve`` serves them
    under the names the env asks for), so ``make_env`` resolves a service for it. ``shared_state_kwarg``: the
    env kwarg naming the folder through which its episodes share state across env instances (MEMORA's
    episodic memory, ``memory_dir``); the agent loop builds one env per episode, so rows run there must set it.
    ``hooks``: ``module:attribute`` of the env's ``EnvHooks`` (``ragym.envs.hooks``: its expert, toy rows,
    longest episode, paper recipe, evaluation summary), loaded when first asked for."""
    if env_id in _ENVS:
        raise ValueError(f"environment {env_id!r} is already registered (by {_ENVS[env_id]})")
    _ENVS[env_id] = entry_point
    if searches_service:
        _SERVICE_ENVS.add(env_id)
    if shared_state_kwarg is not None:
        _SHARED_STATE[env_id] = shared_state_kwarg
    if hooks is not None:
        register_hooks(env_id, hooks)
    gymnasium.register(id=env_id, entry_point=entry_point, **kwargs)


def registered_envs() -> dict[str, str]:
    """Every ragym env id and its entry point."""
    return dict(_ENVS)


def env_packages() -> list[str]:
    """The packages of the registered envs, each once (``ragym.envs.kbvqa`` for ``ragym.envs.kbvqa.env:KBVQAEnv``):
    where tests and tools find each env's own modules (``events``, ``metrics``, ``hooks``) without a list."""
    return sorted({entry_point.split(":")[0].rsplit(".", 1)[0] for entry_point in _ENVS.values()})


def searches_service(env_id: str) -> bool:
    """Whether ``env_id`` was registered as searching through the retrieval service when one is named."""
    return env_id in _SERVICE_ENVS


def shared_state_kwarg(env_id: str) -> str | None:
    """The env kwarg through which ``env_id``'s episodes share state across env instances, or None."""
    return _SHARED_STATE.get(env_id)


@functools.cache
def config_fields(env_id: str) -> frozenset[str]:
    """Field names of ``env_id``'s config dataclass (its constructor's ``config`` argument): the keyword
    overrides the env takes."""
    cls = load_object(_ENVS[env_id])
    hint = typing.get_type_hints(cls.__init__).get("config")
    options = typing.get_args(hint) or (hint,)
    return frozenset(
        f.name for option in options if dataclasses.is_dataclass(option) for f in dataclasses.fields(option)
    )


def make_env(env_id: str, *, retriever: RetrieverSource | None = None, **kwargs: Any) -> gymnasium.Env:
    """Build a registered ragym env, unwrapped (the agent loop needs the raw env, no checker wrappers).

    For an env that searches the service, ``retrieval_url`` / ``retrieval_timeout_s`` / ``retrieval_retries``
    (``SERVICE_KWARGS``) and ``$RAGYM_RETRIEVAL_URL`` resolve here, once per process, into the shared
    ``ServiceRetrievers`` passed to the env as ``retriever``; an explicit ``retriever`` wins over them all.
    """
    if env_id not in _ENVS:
        raise KeyError(f"unknown environment {env_id!r}; registered: {sorted(_ENVS)}")
    if searches_service(env_id):
        service = service_source(**{k: kwargs.pop(k) for k in SERVICE_KWARGS if k in kwargs})
        retriever = retriever or service
    if retriever is not None:
        kwargs["retriever"] = retriever
    return gymnasium.make(env_id, disable_env_checker=True, **kwargs).unwrapped


def service_source(
    retrieval_url: str | None = None, retrieval_timeout_s: float = 10.0, retrieval_retries: int = 2
) -> RetrieverSource | None:
    """The retrieval service named by ``retrieval_url`` (else ``$RAGYM_RETRIEVAL_URL``), or None for neither; an
    empty ``retrieval_url`` searches in process even where the variable is set.

    One source per (URL, client settings) in the process, so every env of a worker shares its clients and
    their circuit breakers; settings that make no search possible are refused here, naming the kwarg.
    """
    if isinstance(retrieval_timeout_s, bool) or not 0 < retrieval_timeout_s < float("inf"):
        raise ValueError(f"retrieval_timeout_s must be a number > 0, got {retrieval_timeout_s!r}")
    if isinstance(retrieval_retries, bool) or not isinstance(retrieval_retries, int) or retrieval_retries < 0:
        raise ValueError(f"retrieval_retries must be an int >= 0, got {retrieval_retries!r}")
    url = os.environ.get(URL_ENV) if retrieval_url is None else retrieval_url
    if not url:
        return None
    client = ClientConfig(
        timeout_s=retrieval_timeout_s, max_retries=retrieval_retries, token=os.environ.get(TOKEN_ENV) or None
    )
    return service_retrievers(url, client)


ENV_PACKAGES_GROUP = "ragym.envs"
"""Entry-point group of installed env packages outside ragym (``name = package``): ``ragym.envs`` imports each
(so each registers its envs) wherever ragym's envs load, Ray workers included."""


def import_env_packages() -> list[str]:
    """Import every env package the ``ragym.envs`` entry points name; one that fails is an error naming it."""
    from importlib.metadata import entry_points

    imported = []
    for point in entry_points(group=ENV_PACKAGES_GROUP):
        try:
            importlib.import_module(point.value)
        except Exception as err:
            raise ImportError(
                f"env package {point.value!r} (entry point {point.name!r} of group {ENV_PACKAGES_GROUP!r}) "
                f"failed to import: {type(err).__name__}: {err}"
            ) from err
        imported.append(point.value)
    return imported


SYNTHETIC_DATA_GROUP = "ragym.synthetic_data"
"""Entry-point group of the builders behind an env's built-in synthetic data (``name = module:function``)."""


def synthetic_data(name: str, preset: str) -> str:
    """The folder of built-in synthetic data ``name`` (e.g. ``kbvqa``) for ``preset``, built once and cached.

    Envs reach their synthetic data through an installed entry point rather than an import, so no env
    depends on data preparation; ragym's ``setup.py`` declares ``data_prep``'s builders as the providers.
    """
    from importlib.metadata import entry_points

    found = list(entry_points(group=SYNTHETIC_DATA_GROUP, name=name))
    if not found:
        raise LookupError(
            f"no synthetic data {name!r} is installed (entry points {SYNTHETIC_DATA_GROUP!r}); "
            "pass a data folder instead, or reinstall ragym (pip install -e .)"
        )
    return str(found[0].load()(preset))
