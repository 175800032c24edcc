"""Chain-of-thought annotators for MEMORA-R training queries: an OpenAI-compatible chat client and an offline fake.

MEMORA-R (seed 000, section 3.2) prefixes each training question with a chain-of-thought annotation r that
spells out the latent retrieval intent. ``ChatAnnotator`` asks any OpenAI-compatible endpoint (a local vLLM
server, a hosted API) for it, caches every answer on disk and retries transient failures. ``OfflineAnnotator``
is a deterministic stand-in for tests and offline runs; its name and every annotation it writes say so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

OFFLINE_ANNOTATOR_NAME = "offline-deterministic-v1"
"""The offline annotator's name, written into every row and report it touches."""
OFFLINE_MARKER = "[offline deterministic annotation, not an LLM]"
"""Prefix of every offline annotation, so no reader mistakes it for a model's reasoning."""

_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its "
    "of on or so than that the their there these this those to was were what when where which who whom why "
    "will with would you your about any more most much many some such not no yes true really actually".split()
)


class AnnotatorError(RuntimeError):
    """An annotation could not be obtained (endpoint down after all retries, or a malformed reply)."""


class Annotator(Protocol):
    """Turns a question into a chain-of-thought annotation of its retrieval intent."""

    name: str
    """Identifier recorded next to every annotation (model name or the offline label)."""

    def annotate(self, question: str) -> str:
        """The annotation r for ``question``."""
        ...


@dataclass(frozen=True)
class OfflineAnnotator:
    """Deterministic template annotation from the question's own content words: no model, no network."""

    max_terms: int = 6
    """How many content words of the question the annotation names."""
    name: str = OFFLINE_ANNOTATOR_NAME
    """Label recorded in rows and reports."""

    def annotate(self, question: str) -> str:
        """A fixed-template intent statement naming the question's content words."""
        words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z'-]+", question)]
        terms = list(dict.fromkeys(w for w in words if w not in _STOPWORDS and len(w) > 2))[: self.max_terms]
        focus = ", ".join(terms) if terms else "the claim as stated"
        return f"{OFFLINE_MARKER} The question asks for evidence about {focus}; a useful answer cites studies on it."


@dataclass(frozen=True)
class ChatAnnotatorConfig:
    """How to reach an OpenAI-compatible ``/chat/completions`` endpoint and how to cache its answers."""

    base_url: str
    """Endpoint root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended)."""
    model: str
    """Model name sent in each request (also recorded as the annotator name)."""
    cache_path: Path
    """JSONL file of prompt-hash -> annotation; requests already answered are never sent again."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the bearer token; unset means no Authorization header (local servers)."""
    system_prompt: str = (
        "You help a search engine. Given a question, reason step by step about what the asker really needs and "
        "which concepts, mechanisms or evidence a document must discuss to answer it. Reply in at most 4 sentences."
    )
    """System message: asks for the latent retrieval intent, as in MEMORA section 3.2."""
    temperature: float = 0.0
    """Sampling temperature; 0 keeps annotations reproducible."""
    max_tokens: int = 256
    """Reply length cap."""
    timeout_s: float = 60.0
    """Per-request socket timeout."""
    max_retries: int = 5
    """Attempts after the first one for timeouts, connection errors, 429 and 5xx replies."""
    backoff_s: float = 1.0
    """First retry delay; doubles on each retry."""


class ChatAnnotator:
    """Chat-endpoint annotator with an on-disk cache and exponential-backoff retries."""

    def __init__(self, config: ChatAnnotatorConfig):
        self.config = config
        self.name = f"chat:{config.model}"
        self.num_requests = 0
        self._cache = self._load_cache(config.cache_path)

    @staticmethod
    def _load_cache(path: Path) -> dict[str, str]:
        if not path.exists():
            return {}
        cache = {}
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                entry = json.loads(line)
                cache[entry["key"]] = entry["annotation"]
            except (json.JSONDecodeError, KeyError) as err:
                raise AnnotatorError(f"{path}:{line_no}: bad cache entry ({err})") from err
        return cache

    def _key(self, question: str) -> str:
        cfg = self.config
        material = json.dumps([cfg.model, cfg.system_prompt, cfg.temperature, cfg.max_tokens, question])
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def annotate(self, question: str) -> str:
        """The endpoint's annotation for ``question``, from the cache when it was asked before."""
        key = self._key(question)
        if key not in self._cache:
            annotation = self._request(question)
            self.config.cache_path.parent.mkdir(parents=True, exist_ok=True)
            with self.config.cache_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "annotation": annotation}) + "\n")
            self._cache[key] = annotation
        return self._cache[key]

    def _request(self, question: str) -> str:
        cfg = self.config
        body = {
            "model": cfg.model,
            "messages": [
                {"role": "system", "content": cfg.system_prompt},
                {"role": "user", "content": question},
            ],
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
        }
        headers = {"Content-Type": "application/json"}
        if os.environ.get(cfg.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[cfg.api_key_env]}"
        url = cfg.base_url.rstrip("/") + "/chat/completions"
        request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), headers=headers)
        last_error: Exception | None = None
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            self.num_requests += 1
            try:
                with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                    return _parse_reply(json.loads(response.read()), url)
            except urllib.error.HTTPError as err:
                # 4xx other than 429 is a request problem that retrying cannot fix.
                if err.code != 429 and err.code < 500:
                    raise AnnotatorError(f"{url}: HTTP {err.code} {err.reason}") from err
                last_error = err
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                last_error = err
            logger.warning("annotator request %d/%d failed: %s", attempt + 1, cfg.max_retries + 1, last_error)
        raise AnnotatorError(f"{url}: no answer after {cfg.max_retries + 1} attempts ({last_error})")


def _parse_reply(reply: dict, url: str) -> str:
    """The assistant text of a chat-completions reply."""
    try:
        text = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as err:
        raise AnnotatorError(f"{url}: malformed chat reply {str(reply)[:200]!r}") from err
    if not isinstance(text, str) or not text.strip():
        raise AnnotatorError(f"{url}: empty annotation in reply")
    return text.strip()
