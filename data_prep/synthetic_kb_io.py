"""Write generated synthetic KB tables in the ``ragym.envs.kbvqa.kb`` on-disk format, plus verl parquet rows."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from PIL import Image

from ragym.data_prep import synthetic_images as images
from ragym.data_prep.encoding import (
    EncodeConfig,
    EncoderSpec,
    Item,
    encode_items,
    encode_to_array,
    load_encoded,
)
from ragym.data_prep.encoding.index import build_sharded_index, index_summary
from ragym.data_prep.rows import verl_row
from ragym.data_prep.synthetic_text import EntityText
from ragym.envs.kbvqa.kb import KB_FORMAT, KB_VERSION
from ragym.envs.retrieval.retrievers import BM25Retriever, build_index, normalise

if TYPE_CHECKING:
    from ragym.data_prep.synthetic_kb import Preset

log = logging.getLogger(__name__)
DATA_SOURCE = "synthetic_kbvqa"
_CHUNK = 2048  # entities rendered and saved per batch (bounds memory at 100k+ entities)
PIXEL_GRID = 8
"""Grid of the pixel encoder's colour layout (the manifest's ``image_encoder``)."""
ENCODING = EncodeConfig(shard_size=4096, batch_size=256, durable=False)
"""Pixel features are cheap per image: large batches, shards of 4096 entities, no flush (a KB build that
dies is rebuilt from scratch)."""


@dataclass
class KBTables:
    """A generated KB in memory, before it is written."""

    entity_text: list[EntityText]
    entity_looks: images.Looks
    signatures: list[str]
    passages: list[str]
    questions: list[tuple[str, list[str], str]]  # (question, answer aliases, question type)
    gold: list[list[int]]  # gold entity rows per question, one per query image
    query_entities: np.ndarray  # (num_query_images,) entity row of each query image, questions in order
    query_images: np.ndarray  # (num_query_images, S, S, 3) uint8


def _save_pngs(root: Path, rel_paths: list[str], pixels: np.ndarray) -> None:
    for rel, array in zip(rel_paths, pixels, strict=True):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(array).save(path, compress_level=1)


def _encode_entities(out: Path, tables: KBTables, size: int) -> np.ndarray:
    """Render and save every entity image, encode them (the encoding step, shards kept under
    ``index/encoded/entities``) and index them under ``index/entities``; returns normalised embeddings (n, d).
    """
    n = len(tables.entity_text)
    rel = [f"images/{i // 1000:03d}/E{i:06d}.png" for i in range(n)]
    for start in range(0, n, _CHUNK):
        rows = np.arange(start, min(n, start + _CHUNK))
        _save_pngs(out, rel[start : rows[-1] + 1], images.render(tables.entity_looks.take(rows), size))
    items = (Item(f"E{i:06d}", tables.entity_text[i].name, str(out / rel[i])) for i in range(n))
    encoded = out / "index" / "encoded" / "entities"
    spec = EncoderSpec("pixel", "entities", {"grid": PIXEL_GRID})
    encode_items(items, spec, encoded, replace(ENCODING, progress=n > _CHUNK), total=n)
    return normalise(load_encoded(encoded)[1])


def _rank_queries(out: Path, tables: KBTables, entity_emb: np.ndarray, top: int) -> np.ndarray:
    """Save query images and embeddings; returns each query's candidate list (top ``top`` entity rows)."""
    num = len(tables.query_entities)
    paths = _query_paths(num)
    _save_pngs(out, paths, tables.query_images)
    items = [Item(f"Q{i:06d}", None, str(out / p)) for i, p in enumerate(paths)]
    spec = EncoderSpec("pixel", "queries", {"grid": PIXEL_GRID})
    query_emb = normalise(encode_to_array(items, spec, config=replace(ENCODING, progress=num > _CHUNK)))
    np.save(out / "index" / "query_embeddings.npy", query_emb)
    return build_index(entity_emb).search(query_emb, min(top, len(entity_emb)))[1]


def _query_paths(num: int) -> list[str]:
    return [f"queries/{i // 1000:03d}/Q{i:06d}.png" for i in range(num)]


def _write_tables(out: Path, tables: KBTables, ranked: np.ndarray) -> None:
    """``entities.parquet`` and ``queries.parquet`` (written once the signatures are final)."""
    n, num = len(tables.entity_text), len(tables.query_entities)
    pd.DataFrame(
        {
            "entity_id": [f"E{i:06d}" for i in range(n)],
            "name": [e.name for e in tables.entity_text],
            "image": [f"images/{i // 1000:03d}/E{i:06d}.png" for i in range(n)],
            "signature": tables.signatures,
        }
    ).to_parquet(out / "entities.parquet")
    pd.DataFrame(
        {
            "query_id": [f"Q{i:06d}" for i in range(num)],
            "image": _query_paths(num),
            "signature": [tables.signatures[e] for e in tables.query_entities],
            "candidates": [[f"E{r:06d}" for r in row if r >= 0] for row in ranked],
        }
    ).to_parquet(out / "queries.parquet")


def lure_gold(ranked: np.ndarray, gold: np.ndarray, share: float, depth: int, seed: int) -> np.ndarray:
    """``ranked`` with look-alikes above the gold on a ``share`` of queries: a gold within the first ``depth``
    candidates is moved to a uniformly drawn later rank of that prefix (never the first); the others keep
    their order. Queries whose gold is outside the prefix, or already last in it, are left as they are."""
    if not 0 <= share <= 1 or depth < 2:
        raise ValueError(f"lure_share must be in [0, 1] and lure_depth >= 2, got {share}, {depth}")
    rng = np.random.default_rng([seed, 7])
    out = ranked.copy()
    for q, (row, entity) in enumerate(zip(out, gold, strict=True)):
        where = np.flatnonzero(row[:depth] == entity)
        if len(where) == 0 or rng.random() >= share:
            continue
        rank = int(where[0])
        if rank >= min(depth, len(row)) - 1:
            continue
        target = int(rng.integers(rank + 1, min(depth, len(row))))  # a later rank in the prefix
        out[q, : target + 1] = np.insert(np.delete(row[: target + 1], rank), target, entity)
    return out


def alphabet_signatures(
    ranked: np.ndarray, query_entities: np.ndarray, num_entities: int, alphabet: int, window: int, seed: int
) -> list[str]:
    """Codes from a small alphabet (``#A0``, ``#A1``, ...) such that within the first ``window`` candidates of
    every query no other entity shares the gold entity's code: the code still identifies the gold entity in
    any batch the env serves, exactly like unique codes, but each code is one frequent token (greedy colouring).
    """
    rng = np.random.default_rng(seed)
    neighbours: list[set[int]] = [set() for _ in range(num_entities)]
    for gold, row in zip(query_entities, ranked[:, :window], strict=True):
        for other in row[row >= 0]:
            if other != gold:
                neighbours[gold].add(int(other))
                neighbours[int(other)].add(int(gold))
    colour = np.full(num_entities, -1)
    for entity in rng.permutation(num_entities):
        taken = {int(colour[o]) for o in neighbours[entity]}
        free = [c for c in range(alphabet) if c not in taken]
        if not free:
            raise ValueError(
                f"signature alphabet {alphabet} is too small: entity {entity} has "
                f"{len(neighbours[entity])} look-alikes within the first {window} candidates"
            )
        colour[entity] = free[int(rng.integers(len(free)))]  # random, not smallest: codes used evenly
    return [f"#{chr(65 + c // 10)}{c % 10}" for c in colour]


def held_out_rows(gold: list[list[int]], split: str, test_fraction: float, seed: int) -> np.ndarray:
    """Which rows are test rows (``Preset.split``): each row alone with probability ``test_fraction`` (``rows``),
    or whole gold entities in a random order until ``test_fraction`` of the rows are theirs (``entity_disjoint``,
    single-image rows; the last entity drawn may take the test split a few rows past it). No row is dropped.

    >>> gold = [[0], [1], [0], [2], [1], [3], [0], [2]]  # entity 0 has three rows, 1 and 2 two, 3 one
    >>> held_out_rows(gold, "entity_disjoint", 0.25, seed=0).astype(int).tolist()  # 0 drawn first: 3 rows, not 2
    [1, 0, 1, 0, 0, 0, 1, 0]
    """
    rng = np.random.default_rng(seed + 1)
    if split == "rows":
        return rng.random(len(gold)) < test_fraction
    entity = np.array([row_gold[0] for row_gold in gold])  # (num_rows,) the single gold entity of each row
    target = round(test_fraction * len(gold))
    if target == 0:
        return np.zeros(len(gold), dtype=bool)
    entities, counts = np.unique(entity, return_counts=True)
    order = rng.permutation(len(entities))
    # Entities in drawn order up to the first whose rows bring the test split to ``target`` rows.
    taken = int(np.searchsorted(np.cumsum(counts[order]), target)) + 1
    return np.isin(entity, entities[order[:taken]])


def _rows(tables: KBTables, preset: Preset, seed: int, kb_dir: Path) -> pd.DataFrame:
    """verl rows: one per question, split deterministically into train and test (``Preset.split``)."""
    is_test = held_out_rows(tables.gold, preset.split, preset.test_fraction, seed)
    env_kwargs = {"kb_dir": str(Path(kb_dir).resolve()), **dict(preset.env_kwargs)}
    records: list[dict[str, Any]] = []
    query = 0
    for i, ((question, answers, qtype), gold) in enumerate(zip(tables.questions, tables.gold, strict=True)):
        paths = [f"queries/{(query + j) // 1000:03d}/Q{query + j:06d}.png" for j in range(len(gold))]
        query += len(gold)
        options = {
            "question": question,
            "query_images": paths,
            "gold_entities": [f"E{g:06d}" for g in gold],
            "answers": answers,
            "question_type": qtype,
        }
        split = "test" if is_test[i] else "train"
        records.append(
            verl_row(
                data_source=DATA_SOURCE,
                ability="kbvqa",
                question=question,
                ground_truth=answers,
                index=i,
                split=split,
                env_id=preset.env_id,
                env_kwargs=env_kwargs,
                env_options=options,
            )
        )
    return pd.DataFrame.from_records(records)


def write_kb(
    out: Path,
    tables: KBTables,
    preset: Preset,
    seed: int,
    name: str,
    rows_kb_dir: Path,
    text_encoder: dict[str, Any] | None = None,
) -> None:
    """Write every KB file and the train/test rows under ``out`` (dense passage vectors if ``text_encoder``)."""
    (out / "index").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    entity_emb = _encode_entities(out, tables, preset.image_size)
    np.save(out / "index" / "entity_embeddings.npy", entity_emb)
    entity_index = build_sharded_index(out / "index" / "encoded" / "entities", out / "index" / "entities")
    ranked = _rank_queries(out, tables, entity_emb, preset.num_candidates)
    if preset.lure_share > 0:
        ranked = lure_gold(ranked, tables.query_entities, preset.lure_share, preset.lure_depth, seed)
    n = len(tables.entity_text)
    if preset.signature_alphabet:
        tables.signatures = alphabet_signatures(
            ranked, tables.query_entities, n, preset.signature_alphabet, preset.signature_window, seed
        )
    _write_tables(out, tables, ranked)
    passages = pd.DataFrame(
        {
            "passage_id": [f"P{i:06d}" for i in range(n)],
            "entity_id": [f"E{i:06d}" for i in range(n)],
            "title": [e.name for e in tables.entity_text],
            "text": tables.passages,
        }
    )
    passages.to_parquet(out / "passages.parquet")
    BM25Retriever.build(passages["text"].tolist(), passages["passage_id"].tolist()).save(
        out / "index" / "bm25"
    )
    if text_encoder is not None:
        items = [Item(p, t) for p, t in zip(passages["passage_id"], passages["text"], strict=True)]
        spec = EncoderSpec(text_encoder["name"], "passages", dict(text_encoder.get("kwargs", {})))
        np.save(out / "index" / "passage_embeddings.npy", normalise(encode_to_array(items, spec)))
    rows = _rows(tables, preset, seed, rows_kb_dir)
    num_rows = {}
    for split in ("train", "test"):
        part = rows[rows["extra_info"].map(lambda e: e["split"]) == split].reset_index(drop=True)
        part.to_parquet(out / "data" / f"{split}.parquet")
        num_rows[split] = len(part)
    log.info(
        "rows: %d in, %d train + %d test out (split %s)",
        len(tables.questions),
        num_rows["train"],
        num_rows["test"],
        preset.split,
    )
    manifest = {
        "format": KB_FORMAT,
        "version": KB_VERSION,
        "name": name,
        "image_encoder": {"name": "pixel", "kwargs": {"grid": PIXEL_GRID}},
        "text_encoder": text_encoder,
        "num_entities": n,
        "num_passages": n,
        "num_queries": len(tables.query_entities),
        # What the encoding step built over the entity vectors: kind, memory, recall@K against exact search.
        "index": {"entities": {"path": "index/entities", **index_summary(entity_index)}},
        "extra": {
            "generator": "ragym.data_prep.synthetic_kb",
            "seed": seed,
            "preset": preset.__dict__ | {"env_kwargs": dict(preset.env_kwargs)},
        },
    }
    (out / "kb.json").write_text(json.dumps(manifest, indent=2, default=str))
