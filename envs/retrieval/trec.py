"""TREC files: relevance judgements (qrels) as the dicts ``ranking`` scores (``{qid: {docid: relevance}}``)."""

from __future__ import annotations

from pathlib import Path


def read_trec_qrels(path: Path) -> dict[str, dict[str, int]]:
    """TREC qrels (``qid iter docid rel``, whitespace-separated) as ``{qid: {docid: rel}}``."""
    qrels: dict[str, dict[str, int]] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: not UTF-8 text, so not TREC qrels ({err.reason} at byte {err.start})"
        ) from err
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            qid, _, docid, rel = line.split()
            qrels.setdefault(qid, {})[docid] = int(rel)
        except ValueError as err:  # not four fields, or a relevance that is not an integer
            raise ValueError(
                f"{path}:{line_no}: expected 'qid iter docid rel' (rel an integer), got {line!r}"
            ) from err
    return qrels
