"""A small synthetic R3G task: look-alike corpus images of which only one shows the cue the question needs.

Each class has one colour layout; its corpus images are that layout plus noise, so the pixel encoder ranks
them in random order (Stage-1 finds the class, not the image). Exactly one image per class shows the cue
(its caption says ``<part> visible: <colour>``); the others are look-alikes whose caption says
``<part> hidden``. The question asks for the colour of the part, so only the gold image answers it. The
captions are the CPU demo's stand-in for what a VLM sees (shown with the env's ``show_captions``): a tiny
policy can read the right judge score off the text, while MRAG (Stage-1 only, top-1) picks the gold image
only by chance (about 1 / images per class).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from ragym.data_prep.r3g_task import TaskRow, write_corpus, write_queries, write_rows
from ragym.envs.files import atomic_write
from ragym.envs.retrieval.encoders import PixelImageEncoder

DATA_SOURCE = "synthetic_r3g"
GENERATOR_VERSION = 1
PARTS = ("tail", "wheel", "roof", "handle", "lid", "wing", "door", "horn")
COLOURS = ("red", "blue", "green", "yellow", "black", "white", "orange", "purple")


@dataclass(frozen=True)
class Preset:
    """Sizes of one synthetic R3G task."""

    num_classes: int = 24
    """Classes (colour layouts); each has ``images_per_class`` corpus images."""
    images_per_class: int = 5
    """Corpus images per class: one shows the cue, the rest are look-alikes (keep >= the env's P)."""
    queries_per_class: int = 2
    """Questions (query images) per class."""
    image_size: int = 24
    """Side of every image in pixels."""
    noise: float = 12.0
    """Pixel noise (0-255 scale) that makes same-class images differ a little."""
    test_fraction: float = 0.25
    """Share of questions in the test split."""
    pool_size: int = 5
    """P written into the rows' env_kwargs (keep <= ``images_per_class``: the pool is then one class)."""


PRESETS = {
    "tiny": Preset(),
    "demo": Preset(num_classes=96, images_per_class=3, queries_per_class=2, pool_size=3),
}


def _layout(rng: np.random.Generator, size: int) -> np.ndarray:
    blocks = rng.integers(0, 256, size=(4, 4, 3)).astype(np.float32)  # (4, 4, 3)
    return np.kron(blocks, np.ones((size // 4 + 1, size // 4 + 1, 1)))[:size, :size]


def _save(out: Path, rel: str, base: np.ndarray, rng: np.random.Generator, noise: float) -> str:
    pixels = np.clip(base + rng.normal(0, noise, base.shape), 0, 255).astype(np.uint8)
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(out / rel)
    return rel


def build_task(out: Path, preset: Preset, seed: int = 0, rows_task_dir: Path | None = None) -> Path:
    """Write the task folder ``out`` (corpus, queries, train/test rows naming ``rows_task_dir``, default
    ``out``) and return it."""
    rng = np.random.default_rng(seed)
    ids, paths, captions, rows = [], [], [], []
    for c in range(preset.num_classes):
        base = _layout(rng, preset.image_size)
        part = PARTS[c % len(PARTS)]
        colours = [str(x) for x in rng.choice(COLOURS, size=4, replace=False)]
        gold_slot = int(rng.integers(preset.images_per_class))
        gold_id = f"C{c:04d}_{gold_slot}"
        for slot in range(preset.images_per_class):
            ids.append(f"C{c:04d}_{slot}")
            paths.append(_save(out, f"corpus/images/{ids[-1]}.png", base, rng, preset.noise))
            captions.append(f"{part} visible: {colours[0]}" if slot == gold_slot else f"{part} hidden")
        for q in range(preset.queries_per_class):
            qid = f"q{c:04d}_{q}"
            order = [int(i) for i in rng.permutation(4)]
            options = {letter: colours[i] for letter, i in zip("ABCD", order, strict=True)}
            rows.append(
                TaskRow(
                    question_id=qid,
                    question=f"What colour is the {part} of the object in the query image?",
                    options=options,
                    answer_choice="ABCD"[order.index(0)],
                    answer=colours[0],
                    query_image=_save(out, f"queries/{qid}.png", base, rng, preset.noise),
                    gold_images=[gold_id],
                    scenario=part,
                )
            )
    encoder = PixelImageEncoder()
    write_corpus(out, ids, paths, captions, encoder, {"name": "pixel", "kwargs": {}})
    write_queries(out, [r.query_image for r in rows], encoder)
    env_kwargs = {"show_captions": True, "pool_size": preset.pool_size}
    write_rows(out, rows, DATA_SOURCE, preset.test_fraction, env_kwargs, rows_task_dir)
    return out


def cache_root() -> Path:
    """Where built-in tasks are cached (``$RAGYM_CACHE`` or ``~/.cache/ragym``)."""
    return Path(os.environ.get("RAGYM_CACHE", Path.home() / ".cache" / "ragym"))


def cached_task(preset_name: str, seed: int = 0) -> Path:
    """The task of a preset, built once per machine; concurrent builders race safely via an atomic rename."""
    if preset_name not in PRESETS:
        raise KeyError(f"unknown synthetic R3G preset {preset_name!r}; known: {sorted(PRESETS)}")
    target = cache_root() / "r3g" / f"{preset_name}-seed{seed}-v{GENERATOR_VERSION}"
    if (target / "corpus" / "manifest.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(
        target, lambda tmp: build_task(tmp, PRESETS[preset_name], seed, rows_task_dir=target)
    )  # concurrent builders: the first one's copy is kept
    return target
