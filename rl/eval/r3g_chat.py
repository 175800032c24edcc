"""A frozen MLLM behind an OpenAI-compatible chat endpoint, for R3G's fixed pipeline (plan, judge, answer).

``POST {base_url}/chat/completions`` with the observation's text and images (PNG data URLs). Replies are
cached on disk by the SHA-256 of the request body, so a re-run (or a second baseline over the same rows)
asks nothing twice; connection errors, timeouts, 429 and 5xx are retried with exponential backoff up to
``max_retries`` times, then raised with the URL and the last error.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ragym.envs.core import IMAGE_PLACEHOLDER

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class ChatConfig:
    """Where the endpoint is and how patiently to ask it."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible API root (vLLM's ``--api`` server, for one)."""
    model: str = "Qwen2.5-VL-7B-Instruct"
    """The ``model`` field of each request."""
    api_key: str | None = None
    """Sent as a bearer token when set."""
    cache_dir: str | None = None
    """Folder of cached replies (None: no cache)."""
    max_retries: int = 3
    """Retries after the first failed attempt."""
    backoff_s: float = 0.5
    """First retry wait; doubles each retry."""
    timeout_s: float = 120.0
    """Per-request timeout."""
    max_tokens: int = 512
    """Reply length limit."""


class ChatError(RuntimeError):
    """The endpoint did not answer after every retry, or answered with something that is not a chat reply."""


def _data_url(image: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def user_content(text: str, images: list[np.ndarray]) -> list[dict[str, Any]]:
    """An observation as OpenAI content parts: text pieces with each image where its placeholder stands."""
    pieces = text.split(IMAGE_PLACEHOLDER)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"{len(pieces) - 1} image placeholders for {len(images)} images")
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append({"type": "text", "text": piece})
        if i < len(images):
            parts.append({"type": "image_url", "image_url": {"url": _data_url(images[i])}})
    return parts


class ChatClient:
    """Chat completions with a disk cache and bounded retries."""

    def __init__(self, config: ChatConfig) -> None:
        self.config = config
        self.num_requests = 0
        """HTTP requests sent (cache hits send none)."""

    def complete(self, messages: list[dict[str, Any]]) -> str:
        """The assistant text for ``messages`` (greedy), from the cache when it holds it."""
        cfg = self.config
        body = json.dumps({"model": cfg.model, "messages": messages, "temperature": 0.0,
                           "max_tokens": cfg.max_tokens}, sort_keys=True).encode()  # fmt: skip
        cached = Path(cfg.cache_dir) / f"{hashlib.sha256(body).hexdigest()}.json" if cfg.cache_dir else None
        if cached is not None and cached.is_file():
            return json.loads(cached.read_text())["text"]
        text = _reply_text(self._post(body))
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(".tmp")
            tmp.write_text(json.dumps({"text": text}))
            tmp.replace(cached)  # atomic: a concurrent reader never sees half a file
        return text

    def _post(self, body: bytes) -> dict[str, Any]:
        cfg = self.config
        url = cfg.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        last: Exception | None = None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            self.num_requests += 1
            try:
                request = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as err:
                if err.code not in RETRY_STATUS:
                    raise ChatError(f"{url}: HTTP {err.code}: {err.read()[:300]!r}") from err
                last = err
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                last = err
        raise ChatError(f"{url}: no reply after {cfg.max_retries + 1} attempts: {last}")


def _reply_text(reply: dict[str, Any]) -> str:
    try:
        text = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as err:
        raise ChatError(f"not a chat completion: {json.dumps(reply)[:300]}") from err
    if not isinstance(text, str):
        raise ChatError(f"chat completion content is not text: {text!r}")
    return text
