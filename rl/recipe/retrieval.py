"""The recipe's one retrieval-service address (``ragym.retrieval.url``) and the envs it reaches.

A recipe names the service once; the local engine and the verl agent loop pass it as ``retrieval_url`` to
every env registered as searching the service (KB-VQA, DocMemo), unless the row's ``env_kwargs`` name one
(``make_env`` turns it into the retriever the env searches through), and
``ragym submit`` also exports it to the job as ``$RAGYM_RETRIEVAL_URL``. Null (the default) leaves envs as
configured: in-process search, or ``$RAGYM_RETRIEVAL_URL`` where the job's environment sets it.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from ragym.rl.errors import UsageError

URL_KEY = "ragym.retrieval.url"
"""Recipe key of the service's base URL (``http://host:port``; null: none)."""


def recipe_retrieval_url(config: DictConfig) -> str | None:
    """``ragym.retrieval.url`` of a composed recipe; anything but null or an http URL is an error naming it."""
    url = OmegaConf.select(config, URL_KEY, default=None)
    if url is None:
        return None
    if not isinstance(url, str) or not url.startswith("http://") or len(url) <= len("http://"):
        raise UsageError(f"{URL_KEY} must be null or an http://host:port URL, got {url!r}")
    return url


def with_retrieval_url(env_id: str, env_kwargs: dict[str, Any], url: str | None) -> dict[str, Any]:
    """``env_kwargs`` plus ``retrieval_url=url`` for an env that searches; a row's own address wins."""
    from ragym.envs.registry import searches_service

    if url is None or "retrieval_url" in env_kwargs or not searches_service(env_id):
        return env_kwargs
    return {**env_kwargs, "retrieval_url": url}
