"""The encoder side of the encoding step: ``preprocess`` (CPU, overlapped) and ``forward`` (the model).

An ``ItemEncoder`` splits encoding in two so that decoding and tokenising the next batch run on a background
thread while the model runs on this one. ``EncoderSpec`` names an encoder in a form that travels to Ray
actors (and into manifests); ``build_encoder`` turns it into an ``ItemEncoder`` with the same code locally
and on every actor. The models themselves are ``ragym.envs.retrieval.encoders`` and ``ragym.envs.docmemo.pages``'s: the role
says which of their methods embeds an item (``entities``: image + title, ``queries``, ``passages``,
``pages``: page text and image).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from ragym.data_prep.encoding.items import EncodingError, Item, item_text, load_image

ROLES = ("entities", "queries", "passages", "pages")
"""Which method of an ``envs`` encoder embeds an item."""
SENTENCE_PREFIXES = {"minilm": "", "e5": "passage: "}
"""Text prefix of each sentence-transformers encoder's passages (E5 needs ``passage: ``)."""
DTYPES = ("float32", "float16", "bfloat16")


class ItemEncoder(Protocol):
    """Embeds a batch of items in two steps: CPU preparation, then the model's forward pass."""

    def preprocess(self, items: Sequence[Item]) -> Any:
        """Read, decode and tokenise ``items`` (runs on a background thread; must not touch the model state)."""
        ...

    def forward(self, batch: Any) -> np.ndarray:
        """(len(items), dim) float32 vectors of a preprocessed batch."""
        ...


@dataclass(frozen=True)
class EncoderSpec:
    """An encoder by name, as it is written to the encoding manifest and rebuilt on each Ray actor."""

    name: str
    """``pixel`` or ``eva_clip`` (images), ``minilm``, ``e5`` or ``sentence`` (a sentence-transformers folder
    in ``kwargs["model_path"]``), ``page_text`` or ``page_visual`` (DocMemo pages)."""
    role: str = "passages"
    """``entities`` (image + title), ``queries`` (image or text), ``passages`` (text) or ``pages``."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments of the ``envs`` encoder (model paths, grid, prefixes)."""
    device: str = "cpu"
    """Where the model runs (``cuda`` on a GPU actor)."""
    dtype: str = "float32"
    """Compute dtype of the model (``float16``/``bfloat16`` on GPUs); vectors are stored as float32."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"encoder role {self.role!r} is not one of {ROLES}")
        if self.dtype not in DTYPES:
            raise ValueError(f"encoder dtype {self.dtype!r} is not one of {DTYPES}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest's ``encoder`` entry)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> EncoderSpec:
        """Inverse of ``to_dict``."""
        return cls(**record)


class SentenceItems:
    """A sentence-transformers model split at its seam: ``preprocess`` tokenises, ``forward`` runs the model."""

    def __init__(
        self,
        model: Any,
        prefix: str = "",
        device: str = "cpu",
        dtype: str = "float32",
        normalize: bool = True,
    ) -> None:
        """Wrap a loaded ``SentenceTransformer`` (moved to ``device``; forward runs under ``dtype`` autocast)."""
        import torch

        self.torch = torch
        self.model = model.to(device).eval()
        # Autocast rather than casting the weights: the model may be shared with envs in this process.
        self.autocast = dtype != "float32"
        self.dtype = getattr(torch, dtype)
        self.prefix, self.device, self.normalize = prefix, device, normalize

    def preprocess(self, items: Sequence[Item]) -> dict[str, Any]:
        """Token ids and attention masks of the prefixed texts."""
        return self.model.preprocess([self.prefix + item_text(i) for i in items])

    def forward(self, batch: dict[str, Any]) -> np.ndarray:
        """Pooled (and L2-normalised) sentence embeddings, float32 (n, dim)."""
        torch = self.torch
        features = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        device_type = self.device.split(":")[0]
        with torch.inference_mode(), torch.autocast(device_type, self.dtype, enabled=self.autocast):
            out = self.model(features)["sentence_embedding"]  # (n, dim)
            if self.normalize:
                out = torch.nn.functional.normalize(out.float(), dim=1)
        return out.float().cpu().numpy()


class EnvEncoderItems:
    """Any ``envs`` encoder object: ``preprocess`` decodes images, ``forward`` calls the role's method."""

    def __init__(self, encoder: Any, role: str) -> None:
        if role not in ROLES:
            raise ValueError(f"encoder role {role!r} is not one of {ROLES}")
        self.encoder, self.role = encoder, role

    def preprocess(self, items: Sequence[Item]) -> tuple[list[Any], list[Any]]:
        """(images, texts) of the batch; images decoded here, off the model's thread."""
        if self.role == "entities":
            return [load_image(i) for i in items], [item_text(i) for i in items]
        if self.role == "passages":
            return [], [item_text(i) for i in items]
        if self.role == "pages":
            images = [load_image(i) if i.image is not None else None for i in items]
            return images, [item_text(i) for i in items]
        images = [load_image(i) for i in items if i.image is not None]
        if images and len(images) != len(items):
            raise EncodingError("a query batch mixes image and text queries; encode them separately")
        return images, [] if images else [item_text(i) for i in items]

    def forward(self, batch: tuple[list[Any], list[Any]]) -> np.ndarray:
        """The role's method of the wrapped encoder, as float32."""
        images, texts = batch
        if self.role == "entities":
            out = self.encoder.encode_entities(images, texts)
        elif self.role == "passages":
            out = self.encoder.encode_passages(texts)
        elif self.role == "pages":
            out = self.encoder.encode_pages(texts, images)
        else:
            out = self.encoder.encode_queries(images or texts)
        return np.asarray(out, dtype=np.float32)


def build_encoder(spec: EncoderSpec) -> ItemEncoder:
    """The ``ItemEncoder`` a spec names (the same call on the driver and on every Ray actor)."""
    kwargs = dict(spec.kwargs)
    if spec.name in (*SENTENCE_PREFIXES, "sentence") and spec.role in ("passages", "queries"):
        return _sentence_items(spec, kwargs)
    if spec.name in ("pixel", "eva_clip"):
        from ragym.envs.retrieval.encoders import make_image_encoder

        if spec.name == "eva_clip":
            kwargs.setdefault("device", spec.device)
        return EnvEncoderItems(make_image_encoder({"name": spec.name, "kwargs": kwargs}), spec.role)
    if spec.name in ("page_text", "page_visual"):
        from ragym.envs.retrieval.page_encoders import TextPageEncoder, VisualPageEncoder

        cls = TextPageEncoder if spec.name == "page_text" else VisualPageEncoder
        return EnvEncoderItems(cls(device=spec.device, **kwargs), "pages")
    raise ValueError(
        f"unknown encoder {spec.name!r}; expected pixel, eva_clip, minilm, e5, sentence, page_text or page_visual"
    )


def _sentence_items(spec: EncoderSpec, kwargs: dict[str, Any]) -> SentenceItems:
    """minilm / e5 / a sentence-transformers folder, with the prefix of the role (``ragym.envs.retrieval.encoders`` kwargs)."""
    from ragym.envs.retrieval.encoders import _sentence_model, minilm_path

    path = kwargs.pop("model_path", None) or (minilm_path() if spec.name == "minilm" else None)
    if path is None:
        raise ValueError(f"encoder {spec.name!r} needs kwargs.model_path")
    device = kwargs.pop("device", spec.device)
    # ragym.envs.retrieval.encoders.SentenceEncoder's kwargs carry both prefixes; the role picks one.
    query_prefix = kwargs.pop("query_prefix", "query: " if spec.name == "e5" else "")
    passage_prefix = kwargs.pop("passage_prefix", SENTENCE_PREFIXES.get(spec.name, ""))
    prefix = query_prefix if spec.role == "queries" else passage_prefix
    return SentenceItems(_sentence_model(path, device), prefix, device, spec.dtype, **kwargs)
