"""The shared chat client against a loopback fake endpoint: retries, the reply cache, images as data URLs."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ragym.data_prep.chat import ChatClient, ChatConfig, ChatError, image_content


class Endpoint(BaseHTTPRequestHandler):
    """Replies from a script of (status, content); answers ``echo: <last message>`` once the script is spent."""

    script: list[tuple[int, str]] = []
    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"body": body, "auth": self.headers.get("Authorization")})
        status, content = type(self).script.pop(0) if type(self).script else (200, None)
        content = content if content is not None else f"echo: {body['messages'][-1]['content']}"
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    Endpoint.script, Endpoint.requests = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def client(url: str, tmp_path: Path, **kw) -> ChatClient:
    return ChatClient(ChatConfig(url, "m", cache_path=tmp_path / "cache.jsonl", backoff_s=0.0, **kw))


USER = [{"role": "user", "content": "hi"}]


def test_request_body_carries_every_setting(url: str, tmp_path: Path) -> None:
    chat = client(url, tmp_path, api_key="sk")
    assert chat.complete(USER, temperature=0.2, max_tokens=7, json_object=True, parse=str) == "echo: hi"
    request = Endpoint.requests[0]
    assert request["auth"] == "Bearer sk"
    assert request["body"] == {
        "model": "m",
        "messages": USER,
        "temperature": 0.2,
        "max_tokens": 7,
        "response_format": {"type": "json_object"},
    }


@pytest.mark.parametrize(
    ("script", "max_retries", "num_requests", "error"),
    [
        ([(503, ""), (429, "")], 2, 3, None),  # overload is retried
        ([(200, "not json")], 1, 2, None),  # a reply that does not parse is retried
        ([(200, "   ")], 1, 2, None),  # so is an empty one
        ([(500, "")] * 3, 2, 3, "no reply after 3 attempts"),  # budget spent: 1 try + 2 retries
        ([(401, "")], 3, 1, "HTTP 401"),  # a refused request is final
    ],
)
def test_retries(
    url: str, tmp_path: Path, script, max_retries: int, num_requests: int, error: str | None
) -> None:
    Endpoint.script = list(script)
    chat = client(url, tmp_path, max_retries=max_retries)
    ask = lambda: chat.complete(USER, parse=lambda text: json.loads(text.replace("echo: hi", '"ok"')))  # noqa: E731
    if error is None:
        assert ask() == "ok"
    else:
        with pytest.raises(ChatError, match=error):
            ask()
        assert not (tmp_path / "cache.jsonl").exists()  # failures are never cached
    assert chat.num_requests == len(Endpoint.requests) == num_requests


def test_unreachable_endpoint_names_the_url(tmp_path: Path) -> None:
    chat = client("http://127.0.0.1:9/v1", tmp_path, max_retries=1, timeout_s=2)
    with pytest.raises(ChatError, match=r"127\.0\.0\.1:9/v1/chat/completions: no reply after 2 attempts"):
        chat.complete(USER)


def test_replies_are_cached_on_disk_by_request(url: str, tmp_path: Path) -> None:
    chat = client(url, tmp_path)
    assert chat.complete(USER) == chat.complete(USER) == "echo: hi"
    assert chat.complete(USER, temperature=0.7) == "echo: hi"  # another request body: asked again
    assert len(Endpoint.requests) == 2
    fresh = client(url, tmp_path)
    assert fresh.complete(USER) == "echo: hi" and fresh.num_requests == 0
    assert len((tmp_path / "cache.jsonl").read_text().splitlines()) == 2


def test_a_broken_cache_names_its_line(url: str, tmp_path: Path) -> None:
    (tmp_path / "cache.jsonl").write_text('{"key": "a", "content": "x"}\n{"key": "b"}\n')
    with pytest.raises(ChatError, match=r"cache\.jsonl:2: bad cache entry"):
        client(url, tmp_path)
    (tmp_path / "cache.jsonl").write_text('{"key": "a", "content": "x"}\n{"key": \n')
    with pytest.raises(ValueError, match=r"cache\.jsonl:2: not JSON"):
        client(url, tmp_path)


def test_an_image_becomes_a_png_data_url_of_the_same_pixels() -> None:
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    for image in (pixels, Image.fromarray(pixels)):
        part = image_content(image)
        assert part["type"] == "image_url"
        head, data = part["image_url"]["url"].split(",", 1)
        assert head == "data:image/png;base64"
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(base64.b64decode(data)))), pixels)
