"""The encoding step: a stream of items through an encoder into vector shards on disk, resumable.

``encode_items`` cuts the stream into shards of ``shard_size`` items, skips shards a previous run finished
(checking their ids still match the stream), and encodes the rest in batches of ``batch_size``: a producer
thread reads the stream and hands batches to ``num_workers`` threads that run ``preprocess`` (decode,
tokenise) while this thread runs ``forward``, at most ``prefetch`` batches ahead. With ``ray_address`` the
same per-shard code runs on Ray Data actors instead (``ragym.data_prep.encoding.ray_data``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ragym.data_prep.encoding import shards
from ragym.data_prep.encoding.encoders import EncoderSpec, ItemEncoder, build_encoder
from ragym.data_prep.encoding.items import EncodingError, Item
from ragym.data_prep.encoding.worker import EncodeConfig, run_shards

log = logging.getLogger(__name__)


def cut_shards(items: Iterable[Item], shard_size: int) -> Iterator[tuple[int, list[Item]]]:
    """(shard index, items) in stream order; checks every item and rejects duplicate ids by name."""
    seen: set[str] = set()
    shard: list[Item] = []
    index = 0
    for item in items:
        item.check()
        if item.id in seen:
            raise EncodingError(f"item id {item.id!r} occurs twice in the stream")
        seen.add(item.id)
        shard.append(item)
        if len(shard) == shard_size:
            yield index, shard
            index, shard = index + 1, []
    if shard:
        yield index, shard


def _encoder_record(encoder: EncoderSpec | ItemEncoder) -> dict[str, Any]:
    if isinstance(encoder, EncoderSpec):
        return encoder.to_dict()
    # An in-process encoder object is identified by its ``name`` when it has one (envs' PageEncoders do), so
    # a resumed run may pass a new instance or wrapper of the same model.
    return {"object": getattr(encoder, "name", f"{type(encoder).__module__}.{type(encoder).__qualname__}")}


def encode_items(
    items: Iterable[Item],
    encoder: EncoderSpec | ItemEncoder,
    out_dir: Path,
    config: EncodeConfig = EncodeConfig(),
    total: int | None = None,
    ray: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Encode ``items`` into shards under ``out_dir`` (resuming a killed run); returns the manifest.

    ``ray`` (``{"address": ..., "num_actors": ..., "gpus_per_actor": ...}``) runs the shards on Ray Data
    actors; it needs an ``EncoderSpec`` (actors build their own encoder) and a folder every node can write.
    """
    root = Path(out_dir)
    shards.check_config(root, {"encoder": _encoder_record(encoder), **config.layout()})
    total = total if total is not None else (len(items) if hasattr(items, "__len__") else None)  # type: ignore[arg-type]
    counts: dict[int, int] = {}

    def todo() -> Iterator[tuple[int, list[Item]]]:
        for index, shard_items in cut_shards(items, config.shard_size):
            counts[index] = len(shard_items)
            if shards.is_finished(root, index):
                if shards.read_ids(root, index) != [i.id for i in shard_items]:
                    raise EncodingError(
                        f"{root}: finished shard {index} holds other ids than the stream; "
                        "the input changed since that run"
                    )
                if bar is not None:
                    bar.update(len(shard_items))
                continue
            yield index, shard_items

    with tqdm(
        total=total,
        unit="item",
        unit_scale=True,
        desc=f"encode {root.name}",
        smoothing=0.1,
        disable=not config.progress,
        mininterval=1.0,
    ) as bar:
        if ray is not None:
            from ragym.data_prep.encoding.ray_data import run_on_ray

            if not isinstance(encoder, EncoderSpec):
                raise ValueError("encoding on Ray needs an EncoderSpec: each actor builds its own encoder")
            run_on_ray(todo(), encoder, root, config, bar, **ray)
        else:
            model = encoder if not isinstance(encoder, EncoderSpec) else build_encoder(encoder)
            for _ in run_shards(todo(), model, root, config, bar):
                pass
    if not counts:
        raise EncodingError("nothing to encode: the item stream is empty")
    dim = shards.read_vectors(root, 0).shape[1]
    manifest = shards.write_manifest(root, [counts[i] for i in range(len(counts))], dim)
    log.info("encoded %d items into %d shards under %s", manifest["num_items"], len(counts), root)
    return manifest


def encode_to_array(
    items: Iterable[Item],
    encoder: EncoderSpec | ItemEncoder,
    out_dir: Path | None = None,
    config: EncodeConfig = EncodeConfig(),
) -> np.ndarray:
    """``encode_items`` then the (num_items, dim) vectors in stream order: what an in-memory prep needs.

    Without ``out_dir`` the shards go to a temporary folder that is removed afterwards.
    """
    if out_dir is not None:
        encode_items(items, encoder, out_dir, config)
        return shards.load_encoded(out_dir)[1]
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ragym-encode-") as tmp:
        encode_items(
            items, encoder, Path(tmp) / "encoded", replace(config, durable=False)
        )  # throwaway shards
        return shards.load_encoded(Path(tmp) / "encoded")[1]
