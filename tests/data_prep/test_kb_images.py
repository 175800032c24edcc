"""``ragym prep kb-images`` against a loopback HTTP server: layout, retries with backoff, failures, resume."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

from ragym.data_prep.kb_images import DownloadConfig, download, image_file
from ragym.data_prep.prep import fetch_images

FAST = DownloadConfig(workers=3, retries=2, backoff_s=0.01, timeout_s=5.0)


def _jpeg(colour: tuple[int, int, int]) -> bytes:
    buffer = BytesIO()
    Image.new("RGB", (8, 8), colour).save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.fixture
def server():
    """A loopback server: /img/<n>.jpg serves an image, /flaky/* fails once with 500, /gone/* is 404,
    /busy/* is always 503. Yields (base URL, hit counter)."""
    hits: Counter[str] = Counter()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            hits[self.path] += 1
            if self.path.startswith("/gone/"):
                status, body = 404, b"no"
            elif self.path.startswith("/busy/"):
                status, body = 503, b"busy"
            elif self.path.startswith("/flaky/") and hits[self.path] == 1:
                status, body = 500, b"oops"
            else:
                status, body = 200, _jpeg((len(self.path) * 7 % 255, 10, 10))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    httpd.shutdown()
    httpd.server_close()


def test_download_retries_reports_failures_and_resumes(server, tmp_path: Path) -> None:
    base, hits = server
    urls = [f"{base}/img/{i}.jpg" for i in range(5)] + [
        f"{base}/flaky/a.png",
        f"{base}/gone/b.jpg",
        f"{base}/busy/c.jpg",
        f"{base}/img/0.jpg",
    ]
    counts = download(urls, tmp_path / "kb_images", FAST)
    assert counts == {"urls": 8, "already_present": 0, "downloaded": 6, "failed": 2}
    assert hits["/flaky/a.png"] == 2  # one retry after the 500
    assert hits["/gone/b.jpg"] == 1  # a 404 is final: not retried
    assert hits["/busy/c.jpg"] == 3  # 503 is transient: 1 + retries attempts
    failures = [
        json.loads(line) for line in (tmp_path / "kb_images" / "failures.jsonl").read_text().splitlines()
    ]
    assert {(f["url"].rsplit("/", 2)[-2], f["attempts"]) for f in failures} == {("gone", 1), ("busy", 3)}
    path = image_file(tmp_path / "kb_images", f"{base}/flaky/a.png")
    assert path.suffix == ".png" and path.parent.name == path.stem[:2] and path.exists()
    assert not list((tmp_path / "kb_images").rglob("*.part"))
    served = sum(hits.values())
    again = download(urls, tmp_path / "kb_images", FAST)  # resume: only the failures are tried again
    assert again == {"urls": 8, "already_present": 6, "downloaded": 0, "failed": 2}
    assert sum(hits.values()) - served == 1 + 3


def test_prep_uses_downloaded_entity_images(server, tmp_path: Path) -> None:
    base, _ = server
    raw = tmp_path / "raw"
    raw.mkdir()
    kb = [
        {
            "wikidata_id": f"Q{i}",
            "wikipedia_title": f"T{i}",
            "wikipedia_content": "Text. More text.",
            "wikipedia_image_url": f"{base}/{'gone' if i == 2 else 'img'}/{i}.jpg",
        }
        for i in range(3)
    ]
    (raw / "Wiki6M_ver_1_0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kb))
    assert fetch_images(["infoseek", "--raw", str(raw), "--workers", "2", "--retries", "0"]) == {
        "urls": 3,
        "already_present": 0,
        "downloaded": 2,
        "failed": 1,
    }
    from ragym.data_prep.kb_build import BuildConfig, _entity_images
    from ragym.data_prep.kb_files import read_kb_file
    from ragym.data_prep.report import PrepReport

    report = PrepReport("infoseek")
    articles = read_kb_file(raw / "Wiki6M_ver_1_0.jsonl", report)
    images = _entity_images(tmp_path / "kb", articles, BuildConfig(kb_images=raw / "kb_images"), report)
    assert [Path(p).parent.parent.name for p in images[:2]] == ["kb_images"] * 2
    assert images[2] == "images/no_image.png" and report.details["entities_without_image"] == 1
