"""The viewer's files: one static page plus data scripts, served live or exported as a folder.

Data travel as small scripts (``data/index.js``, ``data/ep/<id>.js``) that assign to a global, not as
JSON fetched by the page: an exported folder then opens straight from disk (``file://`` pages may not
fetch), and the live server serves exactly the same files.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from ragym.rl.view.data import Corpus, episode_view, index

STATIC = Path(__file__).with_name("static")
"""``index.html``, ``view.js`` and ``view.css``: plain HTML/JS, no build step."""
STATIC_FILES = ("index.html", "view.js", "view.css")
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}
EPISODE_PATH = re.compile(r"^data/ep/(e\d+)\.js$")
IMAGE_PATH = re.compile(r"^images/([0-9a-f]{8,64})\.png$")


def _script(name: str, key: str | None, value: Any) -> bytes:
    """A script that stores ``value`` under ``window[name]`` (or ``window[name][key]``)."""
    data = json.dumps(value, ensure_ascii=False)
    if key is None:
        return f"window.{name} = {data};\n".encode()
    return f"window.{name} = window.{name} || {{}};\nwindow.{name}[{json.dumps(key)}] = {data};\n".encode()


class Site:
    """Maps the page's relative paths to file contents for one corpus."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self._index: bytes | None = None

    def index_script(self) -> bytes:
        """``data/index.js``: the list rows and filter choices (built once)."""
        if self._index is None:
            self._index = _script("RAGYM_INDEX", None, index(self.corpus))
        return self._index

    def get(self, path: str) -> tuple[bytes, str] | None:
        """(content, content type) of a relative path, or None when the site has no such file."""
        path = path.lstrip("/") or "index.html"
        if path in STATIC_FILES:
            return (STATIC / path).read_bytes(), CONTENT_TYPES[Path(path).suffix]
        if path == "data/index.js":
            return self.index_script(), CONTENT_TYPES[".js"]
        match = EPISODE_PATH.match(path)
        if match:
            try:
                view = episode_view(self.corpus, match.group(1))
            except KeyError:
                return None
            return _script("RAGYM_EP", match.group(1), view), CONTENT_TYPES[".js"]
        match = IMAGE_PATH.match(path)
        if match and match.group(1) in self.corpus.images:
            return self.corpus.images[match.group(1)].read_bytes(), CONTENT_TYPES[".png"]
        return None

    def export(self, out: str | Path) -> Path:
        """Write the whole site into ``out`` (replacing an earlier export there); returns ``out/index.html``."""
        out = Path(out)
        if out.exists() and not (out / "data" / "index.js").is_file():
            if any(out.iterdir()):
                raise FileExistsError(f"{out} exists and is not a viewer export: refusing to overwrite it")
        shutil.rmtree(out / "data", ignore_errors=True)
        (out / "data" / "ep").mkdir(parents=True, exist_ok=True)
        (out / "images").mkdir(exist_ok=True)
        for name in STATIC_FILES:
            shutil.copyfile(STATIC / name, out / name)
        (out / "data" / "index.js").write_bytes(self.index_script())
        used: set[str] = set()
        for episode in self.corpus.episodes:
            found = self.get(f"data/ep/{episode['id']}.js")
            if found is None:
                raise KeyError(f"episode {episode['id']!r} of the corpus has no view")
            (out / "data" / "ep" / f"{episode['id']}.js").write_bytes(found[0])
            used.update(episode["images"])
        missing = sorted(used - set(self.corpus.images))
        if missing:
            raise FileNotFoundError(
                f"{len(missing)} images the episodes name are not stored, e.g. {missing[0]}"
            )
        for key in used:
            target = out / "images" / f"{key}.png"
            if not target.exists():
                shutil.copyfile(self.corpus.images[key], target)
        return out / "index.html"
