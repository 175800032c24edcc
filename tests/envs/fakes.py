"""A fake ``RetrieverSource`` for env tests: one retriever under every name, and the names it was asked for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class EveryName:
    """Serves ``retriever`` whatever name an env asks for (DocMemo's per-document names included)."""

    def __init__(self, retriever: Any):
        self.inner = retriever
        self.names: list[str] = []
        """Every name asked for, in order."""

    def retriever(self, name: str) -> Any:
        """The one retriever, recording ``name``."""
        self.names.append(name)
        return self.inner


def write_corpus(texts: dict[str, str], folder: Path) -> str:
    """``texts`` as the ``documents.jsonl`` of ``ragym prep`` (MEMORA's ``corpus_path``) in ``folder``."""
    path = folder / "documents.jsonl"
    path.write_text("".join(json.dumps({"id": d, "content": t}) + "\n" for d, t in texts.items()))
    return str(path)
