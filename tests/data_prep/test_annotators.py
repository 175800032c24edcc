"""The chat-endpoint annotator against a loopback fake server: replies, cache, retries, hard failures."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragym.data_prep.annotators import ChatAnnotator
from ragym.data_prep.chat import ChatConfig, ChatError

MAX_REQUESTS = 20  # the fake server refuses to serve more, so a retry loop gone wrong cannot spin forever


class FakeChat:
    """Scripted replies: a list of HTTP status codes to return before answering 200."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.requests: list[dict] = []


def _handler(state: FakeChat) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append({"path": self.path, "body": body})
            if len(state.requests) > MAX_REQUESTS:
                raise RuntimeError("fake server request budget exceeded")
            status = state.statuses.pop(0) if state.statuses else 200
            question = body["messages"][-1]["content"]
            payload = {"choices": [{"message": {"role": "assistant", "content": f"intent of: {question}"}}]}
            data = json.dumps(payload if status == 200 else {"error": "scripted"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def fake_chat() -> Iterator[tuple[FakeChat, str]]:
    state = FakeChat()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _annotator(url: str, cache: Path, max_retries: int = 3) -> ChatAnnotator:
    return ChatAnnotator(
        ChatConfig(url, "fake-model", cache_path=cache, max_retries=max_retries, backoff_s=0.0, timeout_s=5)
    )


def test_reply_is_cached_on_disk(fake_chat: tuple[FakeChat, str], tmp_path: Path) -> None:
    state, url = fake_chat
    cache = tmp_path / "cache.jsonl"
    annotator = _annotator(url, cache)
    assert annotator.annotate("Do magnets cure pain?") == "intent of: Do magnets cure pain?"
    assert annotator.annotate("Do magnets cure pain?") == "intent of: Do magnets cure pain?"
    assert len(state.requests) == 1 and state.requests[0]["path"] == "/v1/chat/completions"
    assert state.requests[0]["body"]["model"] == "fake-model" and annotator.name == "chat:fake-model"
    # A fresh annotator reads the cache file and sends nothing.
    assert _annotator(url, cache).annotate("Do magnets cure pain?") == "intent of: Do magnets cure pain?"
    assert len(state.requests) == 1


@pytest.mark.parametrize(
    ("statuses", "max_retries", "num_requests", "succeeds"),
    [
        ([503, 429], 3, 3, True),  # transient errors are retried
        ([500, 500, 500, 500], 3, 4, False),  # budget exhausted: 1 try + 3 retries
        ([400], 3, 1, False),  # a client error is not retried
    ],
)
def test_retries(
    fake_chat: tuple[FakeChat, str],
    tmp_path: Path,
    statuses: list[int],
    max_retries: int,
    num_requests: int,
    succeeds: bool,
) -> None:
    state, url = fake_chat
    state.statuses = list(statuses)
    annotator = _annotator(url, tmp_path / "cache.jsonl", max_retries)
    if succeeds:
        assert annotator.annotate("q?") == "intent of: q?"
    else:
        with pytest.raises(ChatError):
            annotator.annotate("q?")
        assert not (tmp_path / "cache.jsonl").exists()  # failures are never cached
    assert len(state.requests) == num_requests


def test_unreachable_endpoint_raises_after_retries(tmp_path: Path) -> None:
    # Port 9 on loopback (discard) is closed here: every attempt is a connection error.
    annotator = _annotator("http://127.0.0.1:9/v1", tmp_path / "cache.jsonl", max_retries=1)
    with pytest.raises(ChatError, match="2 attempts"):
        annotator.annotate("q?")
