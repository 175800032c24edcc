"""TREC files: relevance judgements (qrels) as the dicts ``ranking`` scores (``{qid: {docid: relevance}}``)."""

from __future__ import annotations

from pathlib import Path


def read_trec_qrels(path: Path) -> dict[str, dict[str, int]]:
    """TREC qrels (``qid iter docid rel``, whitespace-separated) as ``{qid: {docid: rel}}``."""
    qrels: dict[str, dict[str, int]] = {}
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4:
            raise ValueError(f"{path}:{line_no}: expected 'qid iter docid rel', got {line!r}")
        qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return qrels
