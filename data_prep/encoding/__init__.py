"""The one encoding step of ragym's data preparation: items -> vector shards on disk -> an index.

See ``pipeline.encode_items`` (local or ``--ray``), ``shards`` (the on-disk layout) and ``index`` (exact
or compressed faiss indexes, sharded when they outgrow one machine). ``python -m ragym.data_prep.encoding``
is the command line.
"""

from ragym.data_prep.encoding.encoders import EncoderSpec, ItemEncoder, build_encoder
from ragym.data_prep.encoding.items import EncodingError, Item, read_items, write_items
from ragym.data_prep.encoding.pipeline import EncodeConfig, encode_items, encode_to_array
from ragym.data_prep.encoding.shards import iter_shards, load_encoded, read_manifest

__all__ = [
    "EncodeConfig",
    "EncoderSpec",
    "EncodingError",
    "Item",
    "ItemEncoder",
    "build_encoder",
    "encode_items",
    "encode_to_array",
    "iter_shards",
    "load_encoded",
    "read_items",
    "read_manifest",
    "write_items",
]
