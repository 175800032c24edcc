"""Training throughput of ragym's MEMORA-R trainer vs a plain sentence-transformers run, in one process.

Both sides train the same backbone (fresh copy each run) with the same batch size, loss, batch sampler and
steps on the same texts. ragym's side gets (q, r, positive, negative) rows and folds [r; q] in its collator;
the plain side gets the already-concatenated anchors, so both encode identical token counts and the ratio
isolates ragym's overhead. Runs alternate (ours, plain, plain, ours, ...) so machine load drifts hit both.
Last line: ``ratio=<ours/plain>``, the median over repeats of adjacent-pair samples/s ratios; goal >= 0.95.

    python benchmarks/contrastive_throughput.py [--steps 8 --batch-size 16 --repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import time

from datasets import Dataset
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.sentence_transformer.training_args import BatchSamplers

from ragym.rl.retriever.augment import augment_query
from ragym.rl.retriever.config import recipe_from_dict, with_overrides
from ragym.rl.retriever.train import build_trainer, load_encoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SEPARATOR = "\n"


def synthetic_rows(num: int, seed: int = 0) -> dict[str, list[str]]:
    """Seeded random-word texts: queries ~20 words, traces ~30, documents ~120 (longer than max length)."""
    rng = random.Random(seed)
    vocab = [
        f"{a}{b}"
        for a in ("vita", "moon", "brain", "sugar", "cold", "gold", "wave", "gene")
        for b in ("min", "quake", "cell", "rush", "front", "fish", "length", "tic", "ray", "dust")
    ]

    def text(n: int) -> str:
        return " ".join(rng.choice(vocab) for _ in range(n))

    return {
        "anchor": [f"{i} {text(20)}" for i in range(num)],
        "reasoning": [f"{i} {text(30)}" for i in range(num)],
        "positive": [f"{i} {text(120)}" for i in range(num)],
        "negative_1": [f"{i} {text(120)}" for i in range(num)],
    }


def run_ours(rows: dict[str, list[str]], recipe) -> tuple[float, float]:
    """(seconds, mean training loss) of ``max_steps`` with ragym's trainer wiring."""
    model = load_encoder(recipe.model)
    trainer = build_trainer(recipe, model, Dataset.from_dict(rows))
    started = time.perf_counter()
    loss = trainer.train().training_loss
    return time.perf_counter() - started, loss


def run_plain(rows: dict[str, list[str]], recipe) -> tuple[float, float]:
    """(seconds, mean training loss) of ``max_steps`` with sentence-transformers alone on concatenated anchors."""
    model = load_encoder(recipe.model)
    anchors = [augment_query(q, r, SEPARATOR) for q, r in zip(rows["anchor"], rows["reasoning"], strict=True)]
    dataset = Dataset.from_dict(
        {"anchor": anchors, "positive": rows["positive"], "negative_1": rows["negative_1"]}
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=recipe.train.output_dir,
        per_device_train_batch_size=recipe.train.batch_size,
        learning_rate=recipe.train.learning_rate,
        max_steps=recipe.train.max_steps,
        # A float below 1 is a share of the schedule (transformers 5 retired warmup_ratio).
        warmup_steps=recipe.train.warmup_ratio,
        weight_decay=recipe.train.weight_decay,
        seed=recipe.train.seed,
        logging_steps=recipe.train.logging_steps,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
    )
    loss = MultipleNegativesRankingLoss(model, scale=recipe.loss.scale)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    started = time.perf_counter()
    loss = trainer.train().training_loss
    return time.perf_counter() - started, loss


def main() -> None:
    """Alternate measured runs and print samples/s for each side, then the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output-dir", default="/tmp/ragym_contrastive_throughput")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    recipe = with_overrides(
        recipe_from_dict({}),
        model={"max_seq_length": args.max_seq_length},
        data={"num_hard_negatives": 1},
        augment={"separator": SEPARATOR, "drop_rate": 0.0},
        train={
            "output_dir": args.output_dir,
            "batch_size": args.batch_size,
            "max_steps": args.steps,
            "show_progress": False,
            "logging_steps": args.steps,
        },
    )
    rows = synthetic_rows(args.steps * args.batch_size)
    # One untimed step each warms up allocator, tokenizer and thread pools.
    warm = with_overrides(recipe, train={"max_steps": 1})
    run_ours(rows, warm), run_plain(rows, warm)
    ratios, rates, losses = [], {"ours": [], "plain": []}, {}
    for repeat in range(args.repeats):
        # Swap who goes first each repeat so a load change inside a pair does not always favour one side.
        sides = (("ours", run_ours), ("plain", run_plain))
        for name, fn in sides if repeat % 2 == 0 else sides[::-1]:
            seconds, losses[name] = fn(rows, recipe)
            rates[name].append(args.steps * args.batch_size / seconds)
            print(f"repeat={repeat} {name}: {rates[name][-1]:.2f} samples/s ({seconds:.1f} s)")
        # Adjacent runs share machine conditions; the median of per-pair ratios resists load spikes.
        ratios.append(rates["ours"][-1] / rates["plain"][-1])
    print(
        f"model=all-MiniLM-L6-v2 batch={args.batch_size} loss=MultipleNegativesRankingLoss steps={args.steps}"
    )
    # Same seed, data and loss: equal training losses show both sides computed the same thing.
    print(f"train_loss ours={losses['ours']:.6f} plain={losses['plain']:.6f}")
    print(
        f"ours_samples_per_s={statistics.median(rates['ours']):.2f} "
        f"plain_samples_per_s={statistics.median(rates['plain']):.2f} (medians)"
    )
    print(f"ratio={statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
