"""Export a trained MEMORA-R encoder with a faiss index over a corpus, and load it back as a ``Retriever``.

Layout of an export folder::

    model/            sentence-transformers model directory (loadable with SentenceTransformer(path))
    index/            the document index, built by the encoding step's index code
                      (``ragym.data_prep.encoding.index``: exact below 200K documents, compressed codes + an exact
                      re-ranking from float16 vectors on disk above, sharded when large; ``index/index.json``
                      records its kind, memory and recall@15)
    docids.json       row -> docid
    passages.jsonl    {"docid", "text"} per row, shown as the hit payload
    retriever.json    format version, query prompt, dimension, number of documents, and the
                      ``text_encoder`` entry a KB-VQA manifest (envs/kbvqa/kb.py) needs to serve this model

``load_dense_retriever(folder)`` returns an ``ragym.envs.retrieval.retrievers.EncodedRetriever``: text queries in, ``Hit``s out.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import faiss
from sentence_transformers import SentenceTransformer

from ragym.data_prep.encoding.index import IndexOptions, VectorBlocks, index_summary, index_vectors
from ragym.envs.files import read_jsonl
from ragym.envs.retrieval.retrievers import EncodedRetriever, FaissRetriever
from ragym.envs.retrieval.service.shards import ShardedRetriever
from ragym.rl.retriever.evaluate import encode, encode_corpus

EXPORT_FORMAT = "ragym-dense-retriever-v2"
"""Written to ``retriever.json``; bump it when the layout changes (v1: one flat ``index.faiss``, still read)."""
OLD_FORMAT = "ragym-dense-retriever-v1"


def export_retriever(
    model: SentenceTransformer,
    corpus: dict[str, str],
    out_dir: Path,
    query_prompt: str | None = None,
    batch_size: int = 64,
    options: IndexOptions | None = None,
) -> Path:
    """Save ``model`` and a faiss index over ``corpus`` (docid -> text) under ``out_dir``."""
    if not corpus:
        raise ValueError("cannot export a retriever over an empty corpus")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir / "model"))
    docids = list(corpus)
    vectors = encode_corpus(model, corpus, batch_size)  # (num_docs, dim), unit norm
    options = options or IndexOptions()
    blocks = VectorBlocks.from_array(docids, vectors, block=min(65_536, options.max_shard_vectors))
    index = index_vectors(blocks, out_dir / "index", options)
    (out_dir / "docids.json").write_text(json.dumps(docids), encoding="utf-8")
    with (out_dir / "passages.jsonl").open("w", encoding="utf-8") as f:
        for docid in docids:
            f.write(json.dumps({"docid": docid, "text": corpus[docid]}) + "\n")
    meta = {
        "format": EXPORT_FORMAT,
        "query_prompt": query_prompt,
        "dim": int(vectors.shape[1]),
        "num_docs": len(docids),
        "index": {"path": "index", **index_summary(index)},
        # A KB-VQA manifest's ``text_encoder`` entry (ragym.envs.retrieval.encoders.make_text_encoder) that serves this model.
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
    if meta.get("format") not in (EXPORT_FORMAT, OLD_FORMAT):
        raise ValueError(f"{path}/retriever.json: format {meta.get('format')!r}, expected {EXPORT_FORMAT!r}")
    docids = json.loads((path / "docids.json").read_text(encoding="utf-8"))
    passages = [row["text"] for _, row in read_jsonl(path / "passages.jsonl")]
    model = SentenceTransformer(str(path / "model"), device=device)
    prompt = meta["query_prompt"]
    if meta["format"] == OLD_FORMAT:
        index = faiss.read_index(str(path / "index.faiss"))
        searcher = FaissRetriever(index, docids, payload=lambda row: {"text": passages[row]})
    else:
        searcher = _indexed(path / meta["index"]["path"] / "index.json", docids, passages)
    return EncodedRetriever(
        searcher,
        encode=lambda queries: encode(model, [str(q) for q in queries], batch_size=64, prompt=prompt),
    )


def _indexed(manifest: Path, docids: list[str], passages: list[str]) -> FaissRetriever | ShardedRetriever:
    """The export's index shards (rows in docid order, shard after shard), each hit carrying its passage."""
    sharded = ShardedRetriever.from_manifest(manifest)
    offset = 0
    for shard in sharded.shards:
        if shard.docids != docids[offset : offset + len(shard.docids)]:
            raise ValueError(f"{manifest}: its ids are not the export's docids.json in order; export again")
        shard.payload = lambda row, offset=offset: {"text": passages[offset + row]}
        offset += len(shard.docids)
    if offset != len(docids):
        raise ValueError(f"{manifest} indexes {offset} documents, docids.json lists {len(docids)}")
    return sharded.shards[0] if len(sharded.shards) == 1 else sharded


def load_dense_retriever(folder: str | Path, device: str | None = None) -> EncodedRetriever:
    """The exported retriever: ``search(text, k)`` / ``batch_search(texts, k)`` -> ``list[Hit]``."""
    return _load(str(Path(folder).resolve()), device)
