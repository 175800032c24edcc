"""Export a trained MEMORA-R encoder with a faiss index over a corpus, and load it back as a ``Retriever``.

Layout of an export folder::

    model/            sentence-transformers model directory (loadable with SentenceTransformer(path))
    index.faiss       faiss inner-product index over unit-norm document embeddings (envs.retrieval.build_index)
    docids.json       row -> docid
    passages.jsonl    {"docid", "text"} per row, shown as the hit payload
    retriever.json    format version, query prompt, dimension, number of documents, and the
                      ``text_encoder`` entry a KB-VQA manifest (envs/kb.py) needs to serve this model

``load_dense_retriever(folder)`` returns an ``envs.retrieval.EncodedRetriever``: text queries in, ``Hit``s out.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import faiss
from sentence_transformers import SentenceTransformer

from envs.retrieval import EncodedRetriever, FaissRetriever, IndexSpec, build_index
from rl.retriever.evaluate import encode, encode_corpus

EXPORT_FORMAT = "ragym-dense-retriever-v1"
"""Written to ``retriever.json``; bump it when the layout changes."""


def export_retriever(
    model: SentenceTransformer,
    corpus: dict[str, str],
    out_dir: Path,
    query_prompt: str | None = None,
    batch_size: int = 64,
    spec: IndexSpec | None = None,
) -> Path:
    """Save ``model`` and a faiss index over ``corpus`` (docid -> text) under ``out_dir``."""
    if not corpus:
        raise ValueError("cannot export a retriever over an empty corpus")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir / "model"))
    docids = list(corpus)
    vectors = encode_corpus(model, corpus, batch_size)  # (num_docs, dim), unit norm
    spec = spec or IndexSpec()
    faiss.write_index(build_index(vectors, spec), str(out_dir / "index.faiss"))
    (out_dir / "docids.json").write_text(json.dumps(docids), encoding="utf-8")
    with (out_dir / "passages.jsonl").open("w", encoding="utf-8") as f:
        for docid in docids:
            f.write(json.dumps({"docid": docid, "text": corpus[docid]}) + "\n")
    meta = {
        "format": EXPORT_FORMAT,
        "query_prompt": query_prompt,
        "dim": int(vectors.shape[1]),
        "num_docs": len(docids),
        "index_kind": spec.kind,
        # A KB-VQA manifest's ``text_encoder`` entry (envs.encoders.make_text_encoder) that serves this model.
        "kb_text_encoder": {
            "name": "minilm",
            "kwargs": {"model_path": str((out_dir / "model").resolve()), "query_prefix": query_prompt or ""},
        },
    }
    (out_dir / "retriever.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out_dir


@lru_cache(maxsize=8)
def _load(folder: str, device: str | None) -> EncodedRetriever:
    """Cached by path: envs built twice on the same export share one model and index."""
    path = Path(folder)
    meta = json.loads((path / "retriever.json").read_text(encoding="utf-8"))
    if meta.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{path}/retriever.json: format {meta.get('format')!r}, expected {EXPORT_FORMAT!r}")
    docids = json.loads((path / "docids.json").read_text(encoding="utf-8"))
    passages = [json.loads(line)["text"] for line in (path / "passages.jsonl").open(encoding="utf-8")]
    index = faiss.read_index(str(path / "index.faiss"))
    model = SentenceTransformer(str(path / "model"), device=device)
    prompt = meta["query_prompt"]
    faiss_retriever = FaissRetriever(index, docids, payload=lambda row: {"text": passages[row]})
    return EncodedRetriever(
        faiss_retriever,
        encode=lambda queries: encode(model, [str(q) for q in queries], batch_size=64, prompt=prompt),
    )


def load_dense_retriever(folder: str | Path, device: str | None = None) -> EncodedRetriever:
    """The exported retriever: ``search(text, k)`` / ``batch_search(texts, k)`` -> ``list[Hit]``."""
    return _load(str(Path(folder).resolve()), device)
