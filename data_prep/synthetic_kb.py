"""Synthetic KB-VQA knowledge base: look-alike entities, passages, query images, candidates, parquet rows.

``ragym prep synthetic-kb --out DIR --preset P [--num-entities N --num-rows N --seed S]`` writes exactly the
``ragym.envs.kbvqa.kb`` on-disk format plus ``DIR/data/{train,test}.parquet`` in verl's row schema, so nothing
downstream knows the data is synthetic. Difficulty presets set the pixel retriever's R@1 / R@15
(``benchmarks/env_step.py`` prints them); ``demo`` is the CPU demo's (small, one candidate per batch, the env's visual check).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ragym.data_prep import synthetic_images as images
from ragym.data_prep import synthetic_text as text
from ragym.data_prep.synthetic_kb_io import KBTables, write_kb
from ragym.envs.files import atomic_write

log = logging.getLogger(__name__)
GENERATOR_VERSION = 7
"""Bump when the generator's output changes, so cached KBs are rebuilt."""

SPLITS = ("rows", "entity_disjoint")
"""The train/test splits a preset can ask for (``Preset.split``)."""


@dataclass(frozen=True)
class Preset:
    """Sizes and difficulty knobs of one synthetic KB."""

    num_entities: int
    """Entities in the KB."""
    num_rows: int
    """Dataset rows (questions) across train and test."""
    family_size: int
    """Look-alike entities per family (global features confuse them)."""
    variant_scale: float
    """How far family members' looks drift from the family look (larger = easier)."""
    query_noise: float
    """Jitter of a query view's look relative to its entity (larger = harder)."""
    pixel_noise: float
    """Per-pixel Gaussian noise of query views."""
    hard_view_fraction: float = 0.0
    """Share of query views so distorted that global features cannot find them (caps R@15)."""
    hard_view_scale: float = 5.0
    """Query-noise multiplier of a hard view."""
    image_size: int = 56
    """Side of every image in pixels (56 = 2x2 Qwen-VL patches of 28)."""
    comparison_fraction: float = 0.2
    """Share of two-image comparison questions."""
    num_candidates: int = 50
    """Length of each stored candidate list (K x (Rej_max + 1) must fit)."""
    test_fraction: float = 0.2
    """Share of rows in the test split."""
    env_id: str = "KBVQA-v0"
    """The env the rows name (the demo's: ``KBVQA-Demo-v0``, KB-VQA with the CPU demo's aids)."""
    env_kwargs: tuple[tuple[str, object], ...] = ()
    """Env config the rows carry besides ``kb_dir`` (the demo's: K=1, Rerank by number, the visual check)."""
    signature_alphabet: int = 0
    """0: a distinct three-letter code per entity. N > 0: codes ``#A0``... from an alphabet of N, assigned so
    that no look-alike within ``signature_window`` candidates shares the gold entity's code (each code is one
    token of the demo's tiny tokenizer: matching a query's code is a one-token copy)."""
    signature_window: int = 9
    """Candidate-list prefix in which the gold entity's code is unique (K x (Rej_max + 1) of the rows' env)."""
    lure_share: float = 0.0
    """Share of query images whose stored candidate list puts look-alikes above the gold: a gold entity within
    the first ``lure_depth`` candidates is moved to a uniformly drawn later rank of that prefix (never the
    first). The pixel retriever's top-1 is then weak against a verifier (the paper's E-VQA setting, R@1 15%)
    while R@``lure_depth`` is unchanged. The live index's query embeddings are not changed: it concerns the
    stored (``precomputed``) candidate lists the demo reads."""
    lure_depth: int = 9
    """Prefix of the candidate list the gold is moved within (K x (Rej_max + 1) of the grid that reads it)."""
    passage_form: str = "prose"
    """How passages state their facts: ``prose`` (sentences padded with look-alike filler) or ``slots`` (one
    sentence, the facts in a fixed order, the region last: ``ragym.data_prep.synthetic_text.passage``)."""
    question_attributes: tuple[str, ...] = text.QUESTION_ATTRIBUTES
    """What single-image questions ask: some of ``year``, ``region``, ``who`` (the cataloguer)."""
    split: str = "rows"
    """How rows go to train or test: ``rows`` (each row alone, test with probability ``test_fraction``) or
    ``entity_disjoint`` (whole gold entities, in a random order, until ``test_fraction`` of the rows are theirs:
    no test question asks about an entity a training question asks about; single-image rows only)."""

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.split == "entity_disjoint" and self.comparison_fraction > 0:
            raise ValueError(
                "split entity_disjoint needs single-image rows (comparison_fraction 0): a comparison "
                "row's two entities could fall on both sides"
            )


PRESETS: dict[str, Preset] = {
    # Calibrated at the preset sizes with benchmarks/env_step.py, which prints R@1 / R@15 for each
    # (paper Table 4 spans R@1 15-54%, R@15 38-80%: easy ~ InfoSeek, hard ~ E-VQA).
    "easy": Preset(
        5000,
        500,
        10,
        variant_scale=0.03,
        query_noise=0.095,
        pixel_noise=0.05,
        hard_view_fraction=0.23,
        hard_view_scale=10.0,
    ),
    "medium": Preset(
        5000, 500, 10, variant_scale=0.06, query_noise=0.15, pixel_noise=0.05, hard_view_fraction=0.28
    ),
    "hard": Preset(
        5000, 500, 10, variant_scale=0.06, query_noise=0.20, pixel_noise=0.05, hard_view_fraction=0.40
    ),
    # The CPU demo: small and single-image (R@1 ~42%, R@3 ~67%): with K=1 and Rej_max=2 an image gets 3
    # candidates, so both Rerank and Reject matter.
    "demo": Preset(
        300,
        600,
        6,
        variant_scale=0.06,
        query_noise=0.20,
        pixel_noise=0.05,
        comparison_fraction=0.0,
        # One candidate per batch, Rerank by number (one constant token), and the env's visual check saying
        # whether the candidate matches: a ~0.5M-parameter policy cannot learn the comparison or a copy from
        # context, but can learn to act on a cue it reads (Rerank or Reject), then search and answer.
        # One passage per text query keeps the context short.
        env_id="KBVQA-Demo-v0",
        env_kwargs=(
            ("candidates_per_batch", 1),
            ("rerank_by_index", True),
            ("visual_check", True),
            ("text_top_k", 1),
        ),
        signature_alphabet=48,
    ),
    # What gymnasium.make("KBVQA-v0") builds: tiny, fast, with comparison questions.
    "tiny": Preset(60, 40, 6, variant_scale=0.06, query_noise=0.20, pixel_noise=0.05),
}


def with_slots(preset: Preset) -> Preset:
    """``preset`` with ``slots`` passages, region questions and an entity-disjoint split: the demo's answer task
    on that preset's KB, whose held-out questions ask about entities no training question does (so answering
    them is copying from the passage, not recalling an answer learnt in training)."""
    return replace(preset, passage_form="slots", question_attributes=("region",), split="entity_disjoint")


PRESETS["demo_slots"] = with_slots(PRESETS["demo"])

PRESETS["demo_k7"] = replace(PRESETS["demo"], signature_window=21)
"""The demo KB with signature codes unique within the first 21 candidates: what Table 6's K = 7 pages
through at Rej_max = 2 (the demo's 9 would let a look-alike past rank 9 share the gold's code)."""
PRESETS["demo_weak_top1"] = replace(PRESETS["demo"], lure_share=0.6, lure_depth=9)
"""The demo with a retriever whose top-1 is weak against the verifier (for MMAgent-R² Table 5's direction): on
60% of query images look-alikes are ranked above the gold within the first 9 candidates: R@1 / R@3 / R@9 19.3 /
35.3 / 84.7% against the demo's 41.7 / 67.0 / 84.7% (seed 0, every row; measured with benchmarks/env_step.recall).
Only the candidate lists change; entities, questions and rows are the demo's."""
PRESETS["demo_k7_slots"] = with_slots(PRESETS["demo_k7"])
"""``demo_k7`` with ``demo_slots``' passages and region questions: Table 6's grid on the answer task."""
PRESETS["demo_weak_top1_slots"] = with_slots(PRESETS["demo_weak_top1"])
"""``demo_weak_top1`` with ``demo_slots``' passages and region questions: Table 5's grid on the answer task."""


def _signatures(rng: np.random.Generator, count: int) -> list[str]:
    """Distinct short uppercase codes, one per entity (the demo's stand-in for visual detail)."""
    length = 3 if count <= 26**3 // 4 else 4 if count <= 26**4 // 4 else 5
    codes = rng.choice(26**length, size=count, replace=False)
    return ["".join(chr(65 + (c // 26**p) % 26) for p in range(length)) for c in codes]


def generate(preset: Preset, seed: int) -> KBTables:
    """Draw every entity, passage and question of a KB in memory (images included)."""
    rng = np.random.default_rng(seed)
    n = preset.num_entities
    family_of, variant_of = np.arange(n) // preset.family_size, np.arange(n) % preset.family_size
    base = images.family_looks(rng, int(family_of.max()) + 1)
    looks = images.jitter(rng, base.take(family_of), preset.variant_scale)
    looks.marks = images.entity_marks(np.arange(n))
    entity_text = text.entity_texts(rng, family_of, variant_of)
    passages = [text.passage(e, rng, form=preset.passage_form) for e in entity_text]
    questions, gold = [], []
    for _ in range(preset.num_rows):
        if rng.random() < preset.comparison_fraction:
            pair = rng.choice(n, size=2, replace=False)
            while entity_text[pair[0]].year == entity_text[pair[1]].year:
                pair = rng.choice(n, size=2, replace=False)
            questions.append(
                text.comparison_question(entity_text[pair[0]], entity_text[pair[1]]) + ("comparison",)
            )
            gold.append([int(e) for e in pair])
        else:
            entity = int(rng.integers(n))
            questions.append(
                text.single_question(entity_text[entity], rng, preset.question_attributes) + ("single",)
            )
            gold.append([entity])
    query_entities = np.array([e for g in gold for e in g], dtype=np.int64)
    hard = rng.random(len(query_entities)) < preset.hard_view_fraction
    noise = np.where(hard, preset.query_noise * preset.hard_view_scale, preset.query_noise)
    query_looks = images.jitter(rng, looks.take(query_entities), noise[:, None])
    query_images = images.render(query_looks, preset.image_size, rng, preset.pixel_noise)
    return KBTables(
        entity_text=entity_text,
        entity_looks=looks,
        signatures=_signatures(rng, n),
        passages=passages,
        questions=questions,
        gold=gold,
        query_entities=query_entities,
        query_images=query_images,
    )


def build_kb(
    out: Path,
    preset: Preset,
    seed: int = 0,
    name: str = "synthetic",
    rows_kb_dir: Path | None = None,
    text_encoder: dict | None = None,
) -> Path:
    """Generate and write a KB to ``out``; rows point at ``rows_kb_dir`` (default ``out``) as their KB.

    ``text_encoder`` (e.g. ``{"name": "minilm"}``) also writes dense passage vectors for ``text_retriever="dense"``.
    """
    start = time.perf_counter()
    tables = generate(preset, seed)
    write_kb(out, tables, preset, seed, name, rows_kb_dir or out, text_encoder)
    log.info(
        "wrote %s KB (%d entities, %d rows) to %s in %.1fs",
        name,
        preset.num_entities,
        preset.num_rows,
        out,
        time.perf_counter() - start,
    )
    return out


def cache_root() -> Path:
    """Where built-in KBs are cached (``$RAGYM_CACHE`` or ``~/.cache/ragym``)."""
    return Path(os.environ.get("RAGYM_CACHE", Path.home() / ".cache" / "ragym"))


def cached_kb(preset_name: str, seed: int = 0) -> Path:
    """The KB of a preset, built once per machine; concurrent builders race safely via an atomic rename."""
    if preset_name not in PRESETS:
        raise KeyError(f"unknown synthetic preset {preset_name!r}; known: {sorted(PRESETS)}")
    target = cache_root() / "kbvqa" / f"{preset_name}-seed{seed}-v{GENERATOR_VERSION}"
    if (target / "kb.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(
        target,
        lambda tmp: build_kb(
            tmp, PRESETS[preset_name], seed, name=f"synthetic-{preset_name}", rows_kb_dir=target
        ),
    )  # concurrent builders: the first one's copy is kept
    return target


def main(argv: list[str]) -> int:
    """``ragym prep synthetic-kb``: write a synthetic KB and its dataset rows."""
    parser = argparse.ArgumentParser(
        prog="ragym prep synthetic-kb", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder (must be empty or absent)")
    parser.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    parser.add_argument("--num-entities", type=int, help="override the preset's entity count")
    parser.add_argument("--num-rows", type=int, help="override the preset's question count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--text-encoder",
        choices=["minilm"],
        help="also write dense passage vectors (enables text_retriever=dense)",
    )
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty")
    preset = PRESETS[args.preset]
    overrides = {"num_entities": args.num_entities, "num_rows": args.num_rows}
    preset = replace(preset, **{k: v for k, v in overrides.items() if v is not None})
    encoder = {"name": args.text_encoder} if args.text_encoder else None
    build_kb(args.out, preset, args.seed, name=f"synthetic-{args.preset}", text_encoder=encoder)
    print(
        json.dumps({"kb_dir": str(args.out.resolve()), "preset": args.preset, **asdict(preset)}, default=str)
    )
    return 0
