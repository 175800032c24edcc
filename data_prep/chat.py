"""The one OpenAI-compatible chat client: a JSON-lines reply cache, retries with backoff, timeouts, images.

Every model call ragym makes outside training goes through ``ChatClient.complete``: MEMORA-R's
chain-of-thought annotations (``data_prep.annotators``), the MEMORA baseline's committee
(``rl.eval.memora_llm``) and R3G's frozen MLLM (``rl.eval.r3g_baselines``). It posts
``{base_url}/chat/completions``; timeouts, connection errors, 408/409/429/5xx and replies that ``parse`` rejects
are retried with exponential backoff, any other HTTP error is raised at once, and after ``max_retries`` retries
``ChatError`` names the URL and the last problem. A reply is cached (in memory and, with ``cache_path``, in a
JSON-lines file later runs reuse) by the SHA-256 of the request body, only once it parsed, so a re-run asks
nothing twice and a bad answer is never served from the cache.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from ragym.envs.files import read_jsonl

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt (overload, timeouts, conflicts); any other error status is final."""


class ChatError(RuntimeError):
    """The endpoint gave no usable reply after every retry, refused the request, or the cache is broken."""


@dataclass(frozen=True)
class ChatConfig:
    """Where the endpoint is and how patiently to ask it."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible API root (vLLM's server, a hosted API); ``/chat/completions`` is appended."""
    model: str = "Qwen2.5-VL-7B-Instruct"
    """The ``model`` field of each request."""
    api_key: str | None = None
    """Sent as a bearer token when set (local servers need none)."""
    cache_path: str | Path | None = None
    """JSON-lines file of request hash -> reply text (None: cache in memory only)."""
    timeout_s: float = 60.0
    """Per-request timeout."""
    max_retries: int = 3
    """Retries after the first failed attempt."""
    backoff_s: float = 1.0
    """First retry wait; doubles each retry."""


class ChatClient:
    """Chat completions with a reply cache and bounded retries."""

    def __init__(self, config: ChatConfig) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self.num_requests = 0
        """HTTP requests sent (cache hits send none)."""
        self._cache_path = Path(config.cache_path) if config.cache_path else None
        self._cache = _read_cache(self._cache_path) if self._cache_path and self._cache_path.exists() else {}

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        json_object: bool = False,
        parse: Callable[[str], T] = str.strip,
    ) -> T:
        """``parse`` of the assistant text for ``messages``, from the cache when it holds it.

        ``json_object`` asks the endpoint for a JSON object (``response_format``); ``parse`` raising
        ``ValueError``, ``KeyError`` or ``TypeError`` makes the reply a failed attempt, retried like a timeout.
        """
        body: dict[str, Any] = {"model": self.config.model, "messages": messages, "temperature": temperature}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if json_object:
            body["response_format"] = {"type": "json_object"}
        data = json.dumps(body, sort_keys=True).encode()
        key = hashlib.sha256(data).hexdigest()
        if key in self._cache:
            return parse(self._cache[key])
        cfg, problem = self.config, ""
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            try:
                text = self._post(data)
                result = parse(text)
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                ValueError,
                KeyError,
                TypeError,
            ) as err:
                problem = f"{type(err).__name__}: {err}"
                log.warning("chat request to %s failed (attempt %d): %s", self.url, attempt + 1, problem)
                continue
            self._store(key, text)
            return result
        raise ChatError(f"{self.url}: no reply after {cfg.max_retries + 1} attempts ({problem})")

    def _post(self, data: bytes) -> str:
        """The assistant text of one request; a non-retryable HTTP error raises ``ChatError``."""
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        self.num_requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                reply = json.loads(response.read())
        except urllib.error.HTTPError as err:
            if err.code in RETRY_STATUS:
                raise ConnectionError(f"HTTP {err.code}") from err
            raise ChatError(f"{self.url}: HTTP {err.code} {err.reason}: {err.read()[:300]!r}") from err
        try:
            text = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError(f"not a chat completion: {json.dumps(reply)[:300]}") from err
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"chat completion content is not text: {text!r}")
        return text

    def _store(self, key: str, text: str) -> None:
        self._cache[key] = text
        if self._cache_path is not None:
            self._cache_path.parent.mkdir(parents=True, exist_ok=True)
            with self._cache_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "content": text}) + "\n")


def _read_cache(path: Path) -> dict[str, str]:
    """The reply cache file as a dict; a broken entry is an error naming the file and line."""
    cache = {}
    for number, entry in read_jsonl(path):
        try:
            cache[entry["key"]] = entry["content"]
        except (KeyError, TypeError) as err:
            raise ChatError(f"{path}:{number}: bad cache entry ({err!r})") from err
    return cache


def image_content(image: np.ndarray | Image.Image) -> dict[str, Any]:
    """An image as an OpenAI content part: a PNG data URL."""
    buffer = io.BytesIO()
    (image if isinstance(image, Image.Image) else Image.fromarray(image)).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}
