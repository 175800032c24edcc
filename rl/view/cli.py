"""``ragym view RUN_OR_FILE [--port P] [--export DIR]``: browse episodes turn by turn in a local web page.

RUN_OR_FILE: a training run folder (``trainer.default_local_dir``), a ``ragym eval`` output folder, a
``ragym demo`` folder, a trace folder or ``episodes.jsonl``, or an eval ``rollouts.jsonl``. The page is
served on 127.0.0.1 by the standard library's HTTP server; ``--export DIR`` writes it as a folder of
static files instead (open ``DIR/index.html``; nothing is fetched from anywhere).
"""

from __future__ import annotations

import argparse
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ragym.rl.view.data import load
from ragym.rl.view.site import Site

logger = logging.getLogger(__name__)


def make_server(site: Site, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for ``site`` (port 0: any free port; read it from ``server.server_address``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            found = site.get(unquote(urlsplit(self.path).path))
            if found is None:
                self.send_error(404, "not part of the viewer")
                return
            body, content_type = found
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
            logger.debug(format, *args)

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_thread(site: Site, host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Start the server on a daemon thread; returns it and its base URL (call ``shutdown()`` to stop)."""
    server = make_server(site, host, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{server.server_address[0]}:{server.server_address[1]}/"


def main(argv: list[str]) -> int:
    """Serve or export the viewer for one run, eval output, demo folder or episodes file."""
    parser = argparse.ArgumentParser(prog="ragym view", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "source", type=Path, help="run / eval / demo folder, trace episodes.jsonl or rollouts.jsonl"
    )
    parser.add_argument("--port", type=int, default=8765, help="port on --host (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--export", type=Path, help="write a self-contained static folder here and exit")
    args = parser.parse_args(argv)
    corpus = load(args.source)
    site = Site(corpus)
    logger.info("%d episodes, %d images from %s", len(corpus.episodes), len(corpus.images), args.source)
    if args.export is not None:
        print(f"wrote {site.export(args.export)}")
        return 0
    server = make_server(site, args.host, args.port)
    print(f"ragym view: http://{server.server_address[0]}:{server.server_address[1]}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
