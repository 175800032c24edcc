"""Shared vocabulary of every ragym environment: the image marker and the turn-length bound."""

from __future__ import annotations

MAX_TURN_CHARS = 8192
"""Default upper bound on one policy turn's length in every env (``max_turn_chars``); longer text is an
``oversized`` format error."""
IMAGE_PLACEHOLDER = "<image>"
"""Marks, in an observation's text, where the next image of ``obs["images"]`` goes (one per image, in order)."""


def defuse(text: str) -> str:
    """Text from data or from the policy with any literal image marker defused: an observation's markers are the
    env's own, one per image (a literal ``<image>`` in a document, question or echoed query would make the agent
    loop's image count wrong and end the episode in error)."""
    return text.replace(IMAGE_PLACEHOLDER, "(image)")
