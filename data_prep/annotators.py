"""Chain-of-thought annotators for MEMORA-R training queries: a chat-endpoint annotator and an offline fake.

MEMORA-R (seed 000, section 3.2) prefixes each training question with a chain-of-thought annotation r that
spells out the latent retrieval intent. ``ChatAnnotator`` asks any OpenAI-compatible endpoint (a local vLLM
server, a hosted API) for it through ``data_prep.chat`` (disk cache, retries). ``OfflineAnnotator``
is a deterministic stand-in for tests and offline runs; its name and every annotation it writes say so.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Protocol

from ragym.data_prep.chat import ChatClient, ChatConfig

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


class Annotator(Protocol):
    """Turns a question into a chain-of-thought annotation of its retrieval intent."""

    @property
    def name(self) -> str:
        """Identifier recorded next to every annotation (model name or the offline label)."""
        ...

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


INTENT_PROMPT = (
    "You help a search engine. Given a question, reason step by step about what the asker really needs and "
    "which concepts, mechanisms or evidence a document must discuss to answer it. Reply in at most 4 sentences."
)
"""System message: asks for the latent retrieval intent, as in MEMORA section 3.2."""


class ChatAnnotator:
    """Annotations from an OpenAI-compatible endpoint through the shared chat client (cached, retried)."""

    def __init__(self, chat: ChatConfig, system_prompt: str = INTENT_PROMPT, max_tokens: int = 256) -> None:
        self.client = ChatClient(chat)
        self.name = f"chat:{chat.model}"
        self.system_prompt, self.max_tokens = system_prompt, max_tokens

    def annotate(self, question: str) -> str:
        """The endpoint's annotation for ``question`` (greedy, so reproducible), from the cache when asked before."""
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": question}]
        return self.client.complete(messages, max_tokens=self.max_tokens)
