"""``ragym prep kb-images``: download the KB's entity images (the KB files list URLs, not pixels), resumably.

Layout under ``--out`` (default ``RAW/kb_images``), which ``ragym prep`` reads back::

    <md5(url)[:2]>/<md5(url)><ext>   one file per URL (ext from the URL, .jpg when it has none)
    failures.jsonl                   {"url", "error", "attempts"} for each URL that still failed

A file is written to ``*.part`` and renamed when complete, so an interrupted run resumes where it stopped
(existing files are skipped). Concurrency is bounded; transient failures (network errors, 429, 5xx) are
retried with exponential backoff; other HTTP errors fail at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from tqdm import tqdm

log = logging.getLogger(__name__)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".svg")


@dataclass(frozen=True)
class DownloadConfig:
    """How ``download`` fetches."""

    workers: int = 8
    """Concurrent downloads."""
    retries: int = 3
    """Extra attempts after a transient failure."""
    backoff_s: float = 1.0
    """First retry delay; doubles on each retry."""
    timeout_s: float = 30.0
    """Per-request timeout."""
    user_agent: str = "ragym-kb-images/0.1 (research data preparation)"
    """Wikimedia asks for an identifying User-Agent."""


def image_file(root: Path, url: str) -> Path:
    """Where the image of ``url`` lives under ``root`` (md5 of the URL, two-character fan-out)."""
    digest = hashlib.md5(url.encode("utf-8")).hexdigest()
    suffix = PurePosixPath(urlparse(url).path).suffix.lower()
    return root / digest[:2] / f"{digest}{suffix if suffix in IMAGE_SUFFIXES else '.jpg'}"


def _transient(err: Exception) -> bool:
    if isinstance(err, urllib.error.HTTPError):
        return err.code == 429 or err.code >= 500
    return isinstance(err, (urllib.error.URLError, TimeoutError, ConnectionError))


def _fetch(url: str, target: Path, cfg: DownloadConfig) -> tuple[str, str | None, int]:
    """Download one URL to ``target``; returns (url, error or None, attempts)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            request = urllib.request.Request(url, headers={"User-Agent": cfg.user_agent})
            with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                data = response.read()
            target.parent.mkdir(parents=True, exist_ok=True)
            part = target.with_name(target.name + ".part")
            part.write_bytes(data)
            part.replace(target)
            return url, None, attempt
        except Exception as err:  # noqa: BLE001 - every failure is reported, none stops the run
            if not _transient(err) or attempt > cfg.retries:
                return url, f"{type(err).__name__}: {err}", attempt
            time.sleep(cfg.backoff_s * 2 ** (attempt - 1))


def download(urls: list[str], out: Path, cfg: DownloadConfig = DownloadConfig()) -> dict[str, int]:
    """Fetch every URL not already under ``out``; failures go to ``out/failures.jsonl``. Returns counts."""
    out.mkdir(parents=True, exist_ok=True)
    unique = list(dict.fromkeys(u for u in urls if u))
    todo = [u for u in unique if not image_file(out, u).exists()]
    counts = {"urls": len(unique), "already_present": len(unique) - len(todo), "downloaded": 0, "failed": 0}
    failures = []
    with ThreadPoolExecutor(max_workers=cfg.workers) as pool, tqdm(total=len(todo), desc="kb images") as bar:
        for url, error, attempts in pool.map(lambda u: _fetch(u, image_file(out, u), cfg), todo):
            if error is None:
                counts["downloaded"] += 1
            else:
                counts["failed"] += 1
                failures.append({"url": url, "error": error, "attempts": attempts})
            bar.update()
    with (out / "failures.jsonl").open("w") as handle:
        handle.writelines(json.dumps(f) + "\n" for f in failures)
    log.info("kb images: %s (failures in %s)", counts, out / "failures.jsonl")
    return counts
