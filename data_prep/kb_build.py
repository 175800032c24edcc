"""Write a real benchmark's KB and verl rows in the ``ragym.envs.kbvqa.kb`` format: entities, 800-character passages,
image and text indexes, precomputed candidate lists, the reachability filter (training splits only) and a report.

Readers hand over ``Article`` and ``Sample`` records; this module knows no dataset. An entity is indexed by its
reference image feature concatenated with its title feature (EVA-CLIP, paper C.1); an entity without an image
shows a grey placeholder and, with EVA-CLIP, is indexed by its title alone (the image half is zero).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from ragym.data_prep.encoding.index import VectorBlocks, index_summary, index_vectors
from ragym.data_prep.kb_encode import encode
from ragym.data_prep.kb_images import image_file
from ragym.data_prep.kb_records import Article, RowError, Sample, chunk_text
from ragym.data_prep.report import PrepReport
from ragym.data_prep.rows import verl_row
from ragym.envs.image_budget import MAX_ASPECT_RATIO
from ragym.envs.kbvqa.kb import KB_FORMAT, KB_VERSION
from ragym.envs.retrieval.retrievers import BM25Retriever, build_index, normalise

log = logging.getLogger(__name__)
ENV_ID = "KBVQA-v0"
PLACEHOLDER = "images/no_image.png"
KB_SPLITS = ("kb", "kb_text")
"""The report's splits that count KB input (articles, MMhops text passages)."""
SIDE_FILE_SUFFIXES = ("_withkb", "_qtype")
"""Splits named ``<split><suffix>`` count the lines of a dataset split's side file (InfoSeek's withkb and qtype
files), not rows; every split that is neither these nor a KB split is a dataset's."""


def is_row_split(split: str) -> bool:
    """Whether the report's ``split`` counts a dataset split's rows (written to ``data/<split>.parquet``)."""
    return split not in KB_SPLITS and not split.endswith(SIDE_FILE_SUFFIXES)


class NoUsableArticle(ValueError):
    """Every KB article was rejected (or the KB had none): there is nothing to index or retrieve."""


@dataclass(frozen=True)
class BuildConfig:
    """Retrieval settings of a real KB (paper defaults)."""

    candidates_per_batch: int = 5
    """K: candidates per SearchImage batch (paper 4.1.2)."""
    max_rejections: int = 2
    """Rej_max: each query image has (Rej_max + 1) x K precomputed candidates."""
    image_encoder: dict[str, Any] = field(default_factory=lambda: {"name": "pixel"})
    """``ragym.envs.retrieval.encoders`` spec: ``{"name": "eva_clip", "kwargs": {"model_path": ..., "processor_path": ...}}``
    for the paper's index; ``pixel`` is the CPU stand-in."""
    text_encoder: dict[str, Any] | None = None
    """``{"name": "e5", "kwargs": {"model_path": ...}}`` writes dense passage vectors; BM25 is always built."""
    train_splits: tuple[str, ...] = ("train",)
    """Splits the reachability filter (D.1) and the gold-entity checks apply to; evaluation splits are never
    filtered for what retrieval cannot reach (their rows keep an unknown gold as null)."""
    kb_images: Path | None = None
    """Folder of ``ragym prep kb-images`` (entity reference images by URL)."""

    @property
    def pool(self) -> int:
        """Candidates stored per query image: (Rej_max + 1) x K."""
        return (self.max_rejections + 1) * self.candidates_per_batch


def _image_problem(path: str) -> str | None:
    """Why the image at ``path`` cannot be shown, or None: ``unreadable`` (it does not decode whole: ``verify``
    passed a JPEG cut short, which then stopped the encoding step) or ``aspect_ratio`` (past the ratio Qwen-VL
    accepts: the env refuses it in every episode that shows it)."""
    try:
        with Image.open(path) as image:
            width, height = image.size
            image.draft("RGB", (1, 1))  # a JPEG decodes at 1/8 scale: cheap, and every byte is still read
            image.load()
    except Exception:  # noqa: BLE001 - any decoder error means the file cannot be shown
        return "unreadable"
    return "aspect_ratio" if max(width, height) > MAX_ASPECT_RATIO * min(width, height) else None


def _entity_images(out: Path, articles: list[Article], cfg: BuildConfig, report: PrepReport) -> list[str]:
    """Each entity's image path (absolute, or the KB's placeholder), counting those without one."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 64), (128, 128, 128)).save(out / PLACEHOLDER)
    paths = []
    for article in articles:
        path = article.image_path
        if path is None and article.image_url and cfg.kb_images is not None:
            fetched = image_file(cfg.kb_images, article.image_url)
            path = str(fetched) if fetched.exists() else None
        problem = None if path is None else _image_problem(path)
        if problem is not None:
            key = f"entity_images_{problem}"
            report.details[key] = report.details.get(key, 0) + 1
            path = None
        paths.append(str(Path(path).resolve()) if path else PLACEHOLDER)
    report.details["entities_without_image"] = sum(p == PLACEHOLDER for p in paths)
    return paths


def _save_query_image(out: Path, image: Any, number: int) -> str:
    """Copy (hard-link when possible) or write one query image into the KB; returns its relative path."""
    if isinstance(image, bytes):
        with Image.open(io.BytesIO(image)) as decoded:
            ext = "." + (decoded.format or "png").lower().replace("jpeg", "jpg")
    else:
        ext = Path(image).suffix.lower() or ".jpg"
    rel = f"queries/{number // 1000:04d}/Q{number:07d}{ext}"
    target = out / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    if isinstance(image, bytes):
        target.write_bytes(image)
    else:
        try:
            os.link(image, target)
        except OSError:
            shutil.copyfile(image, target)
    problem = _image_problem(str(target))
    if problem is not None:
        target.unlink()
        reason = "unreadable_image" if problem == "unreadable" else "image_aspect_ratio"
        raise RowError(reason, f"query image {image if isinstance(image, str) else '<bytes>'}")
    return rel


def _known_golds(sample: Sample, key_row: dict[str, int], cfg: BuildConfig, report: PrepReport) -> Sample:
    """``sample`` with gold keys the KB lacks set to None: an evaluation row is scored on its answer alone
    (D.1: every test sample is evaluated), counted under ``eval_gold_unknown``; a training row is rejected."""
    reason = sample.extra.get("gold_missing")
    missing = [k for k in sample.gold_keys if k is not None and k not in key_row]
    if missing:
        reason = "gold_entity_not_in_kb"
    if reason is None:
        return sample
    if sample.split in cfg.train_splits:
        detail = f"{missing} not in the KB" if missing else "the dataset names no gold entity"
        raise RowError(reason, f"{sample.sample_id}: {detail}")
    unknown = report.details.setdefault("eval_gold_unknown", {}).setdefault(sample.split, {})
    unknown[reason] = unknown.get(reason, 0) + 1
    golds = tuple(None if k is None or k not in key_row else k for k in sample.gold_keys)
    return replace(sample, gold_keys=golds, extra={**sample.extra, "gold_missing": reason})


def _resolve_samples(
    out: Path, samples: list[Sample], key_row: dict[str, int], cfg: BuildConfig, report: PrepReport
) -> tuple[list, list]:
    """(kept samples with their query paths and gold rows, query image paths in order); rejects are counted."""
    kept, query_paths, seen = [], [], set()
    for sample in samples:
        try:
            # A repeated id (the same source row twice) would name two rows and two query images alike.
            if sample.sample_id in seen:
                raise RowError("duplicate_id", f"{sample.sample_id} appeared before")
            seen.add(sample.sample_id)
            sample = _known_golds(sample, key_row, cfg, report)
            paths = []
            for image in sample.images:
                if isinstance(image, str) and not Path(image).exists():
                    raise RowError("missing_image", f"{sample.sample_id}: {image} does not exist")
                try:
                    paths.append(_save_query_image(out, image, len(query_paths) + len(paths)))
                except RowError as err:
                    raise RowError(err.reason, f"{sample.sample_id}: {err}") from err
                except OSError as err:
                    raise RowError("unreadable_image", f"{sample.sample_id}: {err}") from err
        except RowError as err:
            report.reject(sample.split, err.reason, str(err))
            continue
        gold_rows = [None if k is None else key_row[k] for k in sample.gold_keys]
        first = len(query_paths)
        query_paths += paths
        kept.append((sample, list(range(first, first + len(paths))), gold_rows))
    return kept, query_paths


def _recall(kept: list, ranked: np.ndarray, cfg: BuildConfig) -> dict[str, dict[str, float]]:
    """R@1, R@5 and R@pool of the image index per split, over query images with a known gold entity."""
    hits: dict[str, list[np.ndarray]] = {}
    for sample, queries, golds in kept:
        for q, g in zip(queries, golds, strict=True):
            if g is not None:
                hits.setdefault(sample.split, []).append(ranked[q] == g)
    table = {}
    for split, rows in hits.items():
        matrix = np.stack(rows)  # (num_images, pool) bool
        cutoffs = sorted({k for k in (1, 5) if k < matrix.shape[1]} | {matrix.shape[1]})
        table[split] = {"images": len(rows)} | {f"R@{k}": float(matrix[:, :k].any(1).mean()) for k in cutoffs}
    return table


def _passages(articles: list[Article], ids: list[str], loose: list[tuple[str, str]]) -> pd.DataFrame:
    records = [
        (eid, a.title, chunk) for a, eid in zip(articles, ids, strict=True) for chunk in chunk_text(a.text)
    ]
    records += [("", title, chunk) for title, text in loose for chunk in chunk_text(text)]
    frame = pd.DataFrame.from_records(records, columns=["entity_id", "title", "text"])
    frame.insert(0, "passage_id", [f"P{i:08d}" for i in range(len(frame))])
    return frame


def _row(
    sample: Sample,
    index: int,
    data_source: str,
    env_kwargs: dict[str, Any],
    paths: list[str],
    golds: list[str | None],
    candidates: list[list[str]],
) -> dict[str, Any]:
    """One verl row, in the synthetic KB's schema (``ragym.data_prep.synthetic_kb_io``)."""
    options = {
        "question": sample.question,
        "query_images": paths,
        "gold_entities": golds,
        "question_type": sample.question_type,
    }
    return verl_row(
        data_source=data_source,
        ability="kbvqa",
        question=sample.question,
        ground_truth=sample.ground_truth,
        index=index,
        # InfoSeek's data_split (val_unseen_question / val_unseen_entity): ragym eval's harmonic mean reads it.
        split=str(sample.extra.get("data_split", sample.split)),
        env_id=ENV_ID,
        env_kwargs=env_kwargs,
        env_options=options,
        sample_id=sample.sample_id,
        candidates=json.dumps(candidates),
        dataset_fields=json.dumps(sample.extra, default=str),
    )


def _write_rows(
    out: Path,
    data_source: str,
    kept: list,
    query_paths: list[str],
    ranked: np.ndarray,
    entity_ids: list[str],
    cfg: BuildConfig,
    report: PrepReport,
) -> None:
    """Apply the reachability filter to training splits and write ``data/<split>.parquet`` for every dataset split
    read (empty when all its rows were rejected); rows written with an image whose gold entity is unknown are
    counted per split (``rows_without_gold``): no verification reward, reachability filter, Ident. or retriever
    rank applies to them."""
    env_kwargs = {
        "kb_dir": str(out.resolve()),
        "candidates_per_batch": cfg.candidates_per_batch,
        "max_rejections": cfg.max_rejections,
    }
    rows: dict[str, list[dict[str, Any]]] = {s: [] for s in report.splits() if is_row_split(s)}
    without_gold = report.details.setdefault("rows_without_gold", {})
    for sample, queries, golds in kept:
        candidates = [[entity_ids[r] for r in ranked[q] if r >= 0] for q in queries]
        gold_ids = [None if g is None else entity_ids[g] for g in golds]
        reachable = all(g is None or g in c for g, c in zip(gold_ids, candidates, strict=True))
        if sample.split in cfg.train_splits and not reachable:
            report.reject(
                sample.split,
                "unreachable",
                f"{sample.sample_id}: a gold entity is outside the top {cfg.pool} candidates of its image",
            )
            continue
        split_rows = rows.setdefault(sample.split, [])
        paths = [query_paths[q] for q in queries]
        split_rows.append(_row(sample, len(split_rows), data_source, env_kwargs, paths, gold_ids, candidates))
        report.keep(sample.split)
        if None in gold_ids:
            without_gold[sample.split] = without_gold.get(sample.split, 0) + 1
    (out / "data").mkdir(exist_ok=True)
    columns = ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
    for split, records in rows.items():
        pd.DataFrame.from_records(records, columns=columns).to_parquet(out / "data" / f"{split}.parquet")


def manifest_text_retrievers(cfg: BuildConfig) -> list[str]:
    """The text retrievers a KB built with ``cfg`` has: BM25 always, dense with a text encoder."""
    return ["bm25", "dense"] if cfg.text_encoder is not None else ["bm25"]


def _shards(out: Path, kind: str) -> Path:
    """Where the encoding step keeps ``kind``'s vector shards (a rerun with ``--resume`` continues them)."""
    return out / "index" / "encoded" / kind


def _entity_vectors(out: Path, articles: list[Article], images: list[str], cfg: BuildConfig) -> np.ndarray:
    absolute = [p if Path(p).is_absolute() else str(out / p) for p in images]
    titles = [a.title for a in articles]
    ids = [f"{a.key}|{p}" for a, p in zip(articles, images, strict=True)]
    vectors = encode("entities", cfg.image_encoder, ids, absolute, titles, _shards(out, "entities"))  # (n, d)
    if cfg.image_encoder["name"] == "eva_clip":
        # [image, title] layout: an entity without an image is matched by its title alone.
        vectors[np.array([p == PLACEHOLDER for p in images]), : vectors.shape[1] // 2] = 0.0
    return normalise(vectors)


def build(
    out: Path,
    data_source: str,
    articles: list[Article],
    samples: list[Sample],
    report: PrepReport,
    cfg: BuildConfig = BuildConfig(),
    loose_passages: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Write the KB at ``out`` (entities, passages, indexes, candidates, rows, kb.json, report.json);
    ``NoUsableArticle``, before anything is written, when no article is usable (``report`` then counts why)."""
    if not articles:
        for sample in samples:  # rows in = rows out + rows rejected still holds for the report printed
            report.reject(sample.split, "no_kb_article", f"{sample.sample_id}: the KB has no usable article")
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(report.rejected.get("kb", {}).items()))
        raise NoUsableArticle(
            f"the KB has no usable article ({report.num_in['kb']} KB entries read, rejected: "
            f"{reasons or 'none'})"
        )
    (out / "index").mkdir(parents=True, exist_ok=True)
    entity_ids = [f"E{i:07d}" for i in range(len(articles))]
    key_row = {a.key: i for i, a in enumerate(articles)}
    images = _entity_images(out, articles, cfg, report)
    pd.DataFrame(
        {
            "entity_id": entity_ids,
            "name": [a.title for a in articles],
            "image": images,
            "signature": [None] * len(articles),
            "key": [a.key for a in articles],
        }
    ).to_parquet(out / "entities.parquet")
    passages = _passages(articles, entity_ids, list(loose_passages))
    passages.to_parquet(out / "passages.parquet")
    BM25Retriever.build(passages["text"].tolist(), passages["passage_id"].tolist()).save(
        out / "index" / "bm25"
    )
    if cfg.text_encoder is not None:
        texts = passages["text"].tolist()
        ids = [
            hashlib.md5(f"{e}|{t}".encode()).hexdigest()
            for e, t in zip(passages["entity_id"], texts, strict=True)
        ]
        vectors = encode("passages", cfg.text_encoder, ids, texts, out_dir=_shards(out, "passages"))
        np.save(out / "index" / "passage_embeddings.npy", normalise(vectors))
    entity_vectors = _entity_vectors(out, articles, images, cfg)
    np.save(out / "index" / "entity_embeddings.npy", entity_vectors)
    # The entity index, chosen by size (exact, or compressed with its recall measured), from the final vectors
    # (EVA-CLIP entities without an image were adjusted after encoding).
    entity_index = index_vectors(
        VectorBlocks.from_array(entity_ids, entity_vectors), out / "index" / "entities"
    )
    kept, query_paths = _resolve_samples(out, samples, key_row, cfg, report)
    if query_paths:
        paths = [str(out / p) for p in query_paths]
        ids = [f"{s.sample_id}#{j}" for s, queries, _ in kept for j in range(len(queries))]
        query_vectors = normalise(
            encode("queries", cfg.image_encoder, ids, paths, out_dir=_shards(out, "queries"))
        )
        ranked = build_index(entity_vectors).search(query_vectors, min(cfg.pool, len(articles)))[1]
    else:
        query_vectors, ranked = np.zeros((0, entity_vectors.shape[1]), np.float32), np.zeros((0, 0), np.int64)
    np.save(out / "index" / "query_embeddings.npy", query_vectors)
    pd.DataFrame(
        {
            "query_id": [f"Q{i:07d}" for i in range(len(query_paths))],
            "image": query_paths,
            "signature": [None] * len(query_paths),
            "candidates": [[entity_ids[r] for r in row if r >= 0] for row in ranked],
        }
    ).to_parquet(out / "queries.parquet")
    recall = _recall(kept, ranked, cfg)
    _write_rows(out, data_source, kept, query_paths, ranked, entity_ids, cfg, report)
    report.details.update(
        {
            "num_entities": len(articles),
            "num_passages": len(passages),
            "num_query_images": len(query_paths),
            "index_dim": int(entity_vectors.shape[1]),
            "recall": recall,
            "text_retrievers": manifest_text_retrievers(cfg),
        }
    )
    manifest = {
        "format": KB_FORMAT,
        "version": KB_VERSION,
        "name": data_source,
        "image_encoder": cfg.image_encoder,
        "text_encoder": cfg.text_encoder,
        # What SearchText can use; KBVQA-v0's text_retriever=auto takes dense (the paper's E5) when listed.
        "text_retrievers": manifest_text_retrievers(cfg),
        "num_entities": len(articles),
        "num_passages": len(passages),
        "num_queries": len(query_paths),
        "index": {"entities": {"path": "index/entities", **index_summary(entity_index)}},
        "extra": {
            "generator": "ragym.data_prep.kb_build",
            "candidates_per_batch": cfg.candidates_per_batch,
            "max_rejections": cfg.max_rejections,
            "recall": recall,
        },
    }
    (out / "kb.json").write_text(json.dumps(manifest, indent=2, default=str))
    report.save(out)
    return report.as_dict()
