"""Real prose available offline: docstring paragraphs of installed Python packages plus the seed papers.

Used by ``benchmarks/embedding_stats.py`` as the text whose real embeddings the synthetic vectors are
calibrated against. Deterministic for a given environment: files are read in sorted order, paragraphs are
deduplicated, and the sample is drawn with a fixed seed.
"""

from __future__ import annotations

import ast
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"
MIN_WORDS = 8
MAX_CHARS = 1000


def _paragraphs(text: str) -> Iterator[str]:
    """Blank-line separated paragraphs of ``text``, whitespace collapsed, prose-like ones only."""
    for block in re.split(r"\n\s*\n", text):
        para = " ".join(block.split())
        words = para.split()
        # code samples, tables and parameter lists are mostly symbols; keep sentences
        letters = sum(c.isalpha() or c == " " for c in para)
        if len(words) >= MIN_WORDS and letters >= 0.85 * len(para) and not para.startswith(">>>"):
            yield para[:MAX_CHARS]


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
        return  # a file that is not Python 3 source: it has no docstrings to offer
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def collect_paragraphs(num: int, seed: int = 0, roots: list[Path] | None = None) -> list[str]:
    """Up to ``num`` distinct prose paragraphs: all the seed papers' plus a seeded sample of docstrings."""
    roots = roots or [Path(p) for p in sys.path if p.endswith("site-packages")] + [Path(ast.__file__).parent]
    seen: dict[str, None] = {}
    for paper in sorted(SEEDS.glob("*.txt")) if SEEDS.is_dir() else []:
        seen.update(dict.fromkeys(_paragraphs(paper.read_text(encoding="utf-8", errors="replace"))))
    num_papers = len(seen)
    docs: dict[str, None] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for doc in _docstrings(path):
                docs.update(dict.fromkeys(p for p in _paragraphs(doc) if p not in seen))
    log.info("%d paper paragraphs, %d distinct docstring paragraphs", num_papers, len(docs))
    pool = list(docs)
    keep = np.sort(
        np.random.default_rng(seed).choice(len(pool), size=min(len(pool), num - num_papers), replace=False)
    )
    return list(seen) + [pool[i] for i in keep]
