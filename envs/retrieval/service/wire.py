"""How queries and hits travel between the service and its client: plain JSON, vectors as base64 float32.

A vector query is ``{"f32": "<base64 of the float32 bytes>"}`` (a 768-d vector is 4 KB instead of ~15 KB of
decimal text, and decodes without parsing floats); a JSON list of numbers is accepted too. Text queries are
JSON strings. A hit is ``{"docid", "score", "payload"}``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np
import orjson

from ragym.envs.retrieval.hits import Hit


class BadRequest(ValueError):
    """The request cannot be served as sent (HTTP 4xx); the message says what is wrong."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


def encode_query(query: Any) -> Any:
    """A query as JSON data: vectors become ``{"f32": base64}``, strings stay strings."""
    if isinstance(query, np.ndarray):
        return {"f32": base64.b64encode(np.ascontiguousarray(query, dtype=np.float32).tobytes()).decode()}
    if isinstance(query, str):
        return query
    raise TypeError(f"a query is a string or a numpy vector, not {type(query).__name__}")


def decode_query(data: Any) -> str | np.ndarray:
    """The query a client sent: a string, or a float32 vector (from base64 or a list of numbers)."""
    if isinstance(data, str):
        return data
    if isinstance(data, dict) and isinstance(data.get("f32"), str):
        try:
            raw = binascii.a2b_base64(data["f32"])
        except ValueError as error:  # binascii.Error, or a non-ASCII string
            raise BadRequest(f"an f32 vector must be base64 text: {error}") from None
        if len(raw) % 4:
            raise BadRequest("an f32 vector must be a whole number of 4-byte floats")
        return np.frombuffer(raw, dtype=np.float32)
    if isinstance(data, list) and data and all(isinstance(x, int | float) for x in data):
        return np.asarray(data, dtype=np.float32)
    raise BadRequest(f"a query is a string, {{'f32': base64}} or a list of numbers, not {str(data)[:80]!r}")


def encode_hits(hits: list[Hit]) -> bytes:
    """One query's hit list as JSON bytes, the form the service caches and answers with: orjson writes each ``Hit``
    dataclass as ``{"docid", "score", "payload"}`` directly, without an intermediate dict per hit."""
    return dumps(hits)


def results_body(single: bool, encoded: list[bytes]) -> bytes:
    """A ``/search`` (``{"hits": ...}``) or ``/batch_search`` (``{"results": [...]}``) response body from hit lists
    already encoded: answering a cached query decodes and re-encodes nothing."""
    if single:
        return b'{"hits":' + encoded[0] + b"}"
    return b'{"results":[' + b",".join(encoded) + b"]}"


def hits_from_json(data: list[dict[str, Any]]) -> list[Hit]:
    """Hits back from JSON data."""
    return [Hit(h["docid"], float(h["score"]), h["payload"]) for h in data]


def dumps(data: Any) -> bytes:
    """JSON bytes (orjson: numpy scalars and arrays are serialised natively)."""
    return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY)


def loads(body: bytes) -> Any:
    """Parsed JSON; malformed JSON is a ``BadRequest``."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"the body is not JSON: {error}", 400) from None
