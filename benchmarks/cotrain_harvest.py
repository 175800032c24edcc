"""Whether a co-training round can learn from the harvest a weak retriever leaves, before any GRPO grid runs.

``ragym ablate cotrain`` costs about 20 CPU-minutes a seed; this prints in a minute a setting what its rounds would
see and do. On the demo KB (built under ``--out``) it distorts the query side as the grid does
(``initial_noise_rank`` / ``initial_noise_strength``, noise seed 0), then simulates the harvest of ``--steps``
GRPO steps: each step takes the next ``--rows`` training rows, each row ``--rollouts`` episodes, and an episode
confirms the gold with probability ``--p-confirm`` when the serving pool (top 3: K=1, Rej_max=2) holds it (the
warm start's expert confirms a match with 1 - reject_noise = 0.3), the candidates ranked above the gold (or the whole
pool) being its rightly rejected negatives. Labels go into the real harvest buffer; every ``--every`` steps one real
round (``ragym.rl.cotrain.round.run_round``, inline) trains on it and the forgetting guard swaps or skips on held-out
R@``--guard-k`` of every ``--guard-every``-th training image (never harvested; the grid's ``guard.parquet``).
Printed: the weak retriever's R@1/R@3 on training and held-out images, then per round the distinct pairs, the
guard's recall serving -> new and its decision, and the held-out (test split) R@1 and R@3 of the version serving.
Simulated episodes, not the policy's: it sizes the harvest; the grid measures the loop.

    OMP_NUM_THREADS=1 python benchmarks/cotrain_harvest.py --out /tmp/cth --strength 0.75 --rows 8 --rollouts 4 \
        --optimiser sgd --lr 0.5 --round-steps 240 --mined-negatives 16 --guard-k 1 --margin 0 --every 4 --steps 32
"""

from __future__ import annotations

import argparse
import json
import logging
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.envs.kbvqa.harvest import Harvest, Label
from ragym.envs.kbvqa.kb import KnowledgeBase, load_kb
from ragym.envs.retrieval.retrievers import FaissRetriever
from ragym.envs.retrieval.versions import QueryEncoder, load_query_encoder, save_query_encoder
from ragym.rl.cotrain.buffer import HarvestBuffer, HeldOut
from ragym.rl.cotrain.config import CotrainConfig
from ragym.rl.cotrain.round import RoundSpec, query_vectors, recall, run_round

Item = tuple[str, str, str]
"""(query image, gold entity, question)."""
POOL = 3
"""Candidates an image can get in the demo (K=1 x (Rej_max + 1))."""


def items(kb_dir: Path, split: str) -> list[Item]:
    """Every (query image, gold, question) of a split's rows."""
    found = []
    for info in pd.read_parquet(kb_dir / "data" / f"{split}.parquet")["extra_info"]:
        opts = json.loads(info["env_options"])
        found += [
            (q, g, opts["question"]) for q, g in zip(opts["query_images"], opts["gold_entities"], strict=True)
        ]
    return found


def weak_encoder(kb: KnowledgeBase, rank: int, strength: float, folder: Path) -> str:
    """The grid's initial version (``CoTraining._noisy_initial`` with noise seed 0)."""
    dim = int(kb.entity_embeddings.shape[1])
    rng = np.random.default_rng(0)
    u, v = (rng.standard_normal((dim, rank)).astype(np.float32) / dim**0.5 for _ in range(2))
    matrix = np.eye(dim, dtype=np.float32) + strength * dim**0.5 * (u @ v.T)  # (dim, dim)
    return str(save_query_encoder(QueryEncoder("initial-noise", matrix, {"step": 0}), folder))


def step_harvest(
    kb: KnowledgeBase, serving: str, batch: list[Item], args: argparse.Namespace, rng: random.Random
) -> Harvest:
    """One simulated step's labels: each row's ``--rollouts`` episodes over its serving pool."""
    exact = FaissRetriever.from_vectors(
        np.asarray(kb.entity_embeddings, dtype=np.float32), kb.entities["entity_id"].tolist()
    )
    vectors = load_query_encoder(serving).encode(query_vectors(kb, [q for q, _, _ in batch]))
    harvest = Harvest()
    for (query, gold, question), hits in zip(batch, exact.batch_search(list(vectors), POOL), strict=True):
        pool = [h.docid for h in hits]
        above = tuple(pool[: pool.index(gold)]) if gold in pool else tuple(pool)
        for _ in range(args.rollouts):
            confirmed = gold in pool and rng.random() < args.p_confirm
            harvest.labels.append(Label(query, question, (gold,) if confirmed else (), above))
    return harvest


def simulate(args: argparse.Namespace) -> None:
    """Print the weak retriever's recall and each round's effect for one setting."""
    kb_dir = args.out / "kb"
    if not (kb_dir / "kb.json").exists():
        build_kb(kb_dir, PRESETS["demo"], seed=0, name="synthetic-demo")
    kb, train, test = load_kb(str(kb_dir)), items(kb_dir, "train"), items(kb_dir, "test")
    # the guard reads every --guard-every-th training image (the grid's guard.parquet), never the reported test set
    guard = tuple((q, g) for q, g, _ in train[args.guard_every - 1 :: args.guard_every])
    train = [item for i, item in enumerate(train) if (i + 1) % args.guard_every]
    held_out = tuple((q, g) for q, g, _ in test)
    run = args.out / (
        f"s{args.strength}-r{args.rows}x{args.rollouts}-{args.optimiser}-lr{args.lr}-n{args.round_steps}"
        f"-m{args.mined_negatives}-k{args.guard_k}-d{args.margin}-e{args.every}-t{args.steps}-seed{args.seed}"
    )
    serving = weak_encoder(kb, args.rank, args.strength, run / "initial")
    for name, pairs in (("training", tuple((q, g) for q, g, _ in train)), ("held-out", held_out)):
        found = recall(kb, load_query_encoder(serving), pairs, (1, POOL))
        print(
            f"weak retriever on {len(pairs)} {name} images: R@1 {found['recall@1']:.3f} R@3 {found['recall@3']:.3f}"
        )
    cfg = CotrainConfig(
        enable=True,
        background=False,
        lr=args.lr,
        optimiser=args.optimiser,
        round_steps=args.round_steps,
        mined_negatives=args.mined_negatives,
        guard_k=args.guard_k,
        max_recall_drop=args.margin,
    )
    buffer = HarvestBuffer(run / "buffer", HeldOut(frozenset(q for q, _ in guard + held_out)))
    rng = random.Random(args.seed)
    order = rng.sample(train, len(train))
    for step in range(1, args.steps + 1):
        batch = [order[i % len(order)] for i in range((step - 1) * args.rows, step * args.rows)]
        buffer.add(step, step_harvest(kb, serving, batch, args, rng))
        if step % args.every:
            continue
        version = run / f"v{step}"
        meta = run_round(
            RoundSpec(
                str(kb_dir),
                str(buffer.folder),
                step,
                serving,
                str(version),
                f"v{step}",
                guard,
                (1, POOL),
                asdict(cfg),
            )
        )
        k = args.guard_k
        swapped = meta[f"new_recall@{k}"] >= meta[f"serving_recall@{k}"] - cfg.max_recall_drop
        serving = str(version) if swapped else serving
        found = recall(kb, load_query_encoder(serving), held_out, (1, POOL))
        print(
            f"round at step {step:>2}: {meta['num_harvested_pairs']:>3} pairs, guard R@{k} "
            f"{meta[f'serving_recall@{k}']:.3f} -> {meta[f'new_recall@{k}']:.3f}: "
            f"{'swapped' if swapped else 'skipped'}; held-out R@1 {found['recall@1']:.3f} R@3 {found['recall@3']:.3f}"
        )


def main() -> None:
    """Parse the setting and simulate it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the demo KB and the versions go here")
    parser.add_argument("--rank", type=int, default=8, help="initial_noise_rank")
    parser.add_argument("--strength", type=float, default=0.75, help="initial_noise_strength")
    parser.add_argument("--rows", type=int, default=8, help="data.train_batch_size")
    parser.add_argument("--rollouts", type=int, default=4, help="actor_rollout_ref.rollout.n")
    parser.add_argument(
        "--p-confirm", type=float, default=0.3, help="P(an episode confirms a gold in its pool)"
    )
    parser.add_argument("--lr", type=float, default=0.5, help="ragym.cotrain.lr")
    parser.add_argument("--optimiser", default="sgd", help="ragym.cotrain.optimiser")
    parser.add_argument("--round-steps", type=int, default=240, help="ragym.cotrain.round_steps")
    parser.add_argument("--mined-negatives", type=int, default=16, help="ragym.cotrain.mined_negatives")
    parser.add_argument("--guard-k", type=int, default=1, help="ragym.cotrain.guard_k")
    parser.add_argument("--margin", type=float, default=0.0, help="ragym.cotrain.max_recall_drop")
    parser.add_argument(
        "--guard-every", type=int, default=10, help="the guard reads every N-th training image"
    )
    parser.add_argument("--every", type=int, default=4, help="ragym.cotrain.every_n_steps")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps simulated")
    parser.add_argument("--seed", type=int, default=0, help="row order and confirmation draws")
    logging.basicConfig(level=logging.WARNING)
    simulate(parser.parse_args())


if __name__ == "__main__":
    main()
