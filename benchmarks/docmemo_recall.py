"""Cumulative gold-evidence recall per round: DocMemo's memory loop vs static top-k, on real MMLongBench-Doc.

The loop runs the real ``DocMemo-v0`` env, driven by an oracle *feedback* policy: it selects every
candidate it has not read yet (no reranking skill, no gold knowledge), so the env's posterior-mean ranking
picks the evidence; after reading, it marks the gold pages it was shown useful and the others
irrelevant, and refines its query as the paper's reasoner does, from the evidence text it was shown (the
question plus the useful pages' salient terms, or plus what is missing: the rule is in
``ragym.rl.ablate.docmemo``, whose ``oracle_loop`` this runs).
The loop runs with the default config and with each of ``reshow_evidence`` (the issue's literal rule:
evidence may repeat earlier evidence) and ``exclude_judged_candidates`` flipped, and with both.
Static top-k ranks pages once by the question's similarity. Two page budgets:
- ``E*t`` pages by round t: the loop's E evidence pages per round, re-shown pages counted again
  (``recall_gain`` uses this one, the stricter for the loop);
- the number of distinct pages the default loop has shown by round t, for the same question and seed.
A further line runs the default loop with no feedback, isolating what belief updates add over Thompson
exploration. Also timed: one belief update plus one Thompson draw on a 1,000-page document.

    python benchmarks/docmemo_recall.py [--prepared runs/docmemo_mmlb] [--seeds 3]

The last line is ``recall_gain=<final-round recall of the loop minus static top-k>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragym.data_prep.mmlongbench_doc import PrepConfig, prepare  # noqa: E402
from ragym.envs.docmemo.beliefs import PageBeliefs  # noqa: E402
from ragym.envs.docmemo.env import DocMemoEnv  # noqa: E402
from ragym.rl.ablate.docmemo import oracle_loop  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "mmlongbench_doc"


def load_rows(prepared: Path, dpi: int) -> list[dict]:
    """Answerable rows with gold pages; prepares the shared data first when needed."""
    if not (prepared / "data" / "test.parquet").is_file():
        if not SHARED.is_dir():
            raise SystemExit(f"no prepared data at {prepared} and no shared data at {SHARED}")
        prepare(SHARED / "samples.json", SHARED / "documents", prepared, PrepConfig(dpi=dpi))
    rows = []
    for row in pd.read_parquet(prepared / "data" / "test.parquet").itertuples():
        gold = json.loads(row.reward_model["ground_truth"])["evidence_pages"]
        if gold:
            rows.append(
                {
                    "options": json.loads(row.extra_info["env_options"]),
                    "gold": set(gold),
                    "kwargs": json.loads(row.extra_info["env_kwargs"]),
                }
            )
    return rows


def static_ranking(env: DocMemoEnv, options: dict) -> list[int]:
    """Every page, best first, by the question's similarity."""
    env.reset(seed=0, options=options)
    return [int(h.docid) for h in env.retriever.search(options["question"], env.store.num_pages)]


def belief_round_seconds(num_pages: int, num_rounds: int) -> float:
    """Mean wall time of update(3 useful, 3 irrelevant) + one Thompson draw on ``num_pages`` pages."""
    rng = np.random.default_rng(0)
    beliefs = PageBeliefs(rng.random(num_pages), kappa=4.0, radius=2, decay=0.5)
    marks = rng.choice(num_pages, size=(num_rounds, 6), replace=True)
    start = time.perf_counter()
    for row in marks:
        useful, irrelevant = set(row[:3].tolist()), set(row[3:].tolist())
        beliefs.update(useful, irrelevant - useful)
        beliefs.sample(rng)
    return (time.perf_counter() - start) / num_rounds


def main(argv: list[str] | None = None) -> int:
    """Print per-round recall and all-hit rate for each method, the timing, then recall_gain."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", type=Path, default=Path("runs/docmemo_mmlb"))
    parser.add_argument("--dpi", type=int, default=72, help="render resolution when preparing")
    parser.add_argument("--seeds", type=int, default=3, help="Thompson seeds per question")
    args = parser.parse_args(argv)
    rows = load_rows(args.prepared, args.dpi)
    env = DocMemoEnv(**rows[0]["kwargs"], show_images=False)
    c = env.config
    rounds = c.max_rounds
    # Each loop variant: (name, config overrides, oracle feedback on); the first is the default config.
    flip_r, flip_x = (
        {"reshow_evidence": not c.reshow_evidence},
        {"exclude_judged_candidates": not c.exclude_judged_candidates},
    )
    variants = [
        ("memory loop (oracle feedback)", {}, True),
        (f"  ... reshow_evidence={flip_r['reshow_evidence']}", flip_r, True),
        (f"  ... exclude_judged_candidates={flip_x['exclude_judged_candidates']}", flip_x, True),
        ("  ... both flipped", {**flip_r, **flip_x}, True),
        ("memory loop (no feedback)", {}, False),
    ]
    loop_envs = [
        DocMemoEnv(**rows[0]["kwargs"], show_images=False, **overrides) for _, overrides, _ in variants
    ]
    static = ("static top-k, E*t pages", "static top-k, loop's distinct pages")
    results: dict[str, list[list[set[int]]]] = {name: [] for name in [v[0] for v in variants] + list(static)}
    golds = []
    for row in rows:
        ranking = static_ranking(env, row["options"])
        for seed in range(args.seeds):
            golds.append(row["gold"])
            for (name, _, feedback), loop_env in zip(variants, loop_envs, strict=True):
                results[name].append(
                    oracle_loop(loop_env, row["options"], row["gold"], seed, feedback, remember=True)
                )
            loop = results[variants[0][0]][-1]
            results[static[0]].append([set(ranking[: c.num_evidence * t]) for t in range(1, rounds + 1)])
            results[static[1]].append([set(ranking[: len(shown)]) for shown in loop])
    print(
        f"{len(rows)} answerable questions x {args.seeds} seeds; M={c.num_candidates} E={c.num_evidence} "
        f"T={rounds} kappa={c.kappa} radius={c.radius} decay={c.decay} lambda_t={c.lambda_0}*{c.eta}^t "
        f"reshow_evidence={c.reshow_evidence} exclude_judged_candidates={c.exclude_judged_candidates}"
    )
    print(f"{'method':38s} " + " ".join(f"recall@r{t + 1:<3d}" for t in range(rounds)) + "  all-hit@final")
    final = {}
    for name, runs in results.items():
        recall = [
            np.mean([len(run[min(t, len(run) - 1)] & g) / len(g) for run, g in zip(runs, golds, strict=True)])
            for t in range(rounds)
        ]
        all_hit = np.mean([g <= run[-1] for run, g in zip(runs, golds, strict=True)])
        final[name] = recall[-1]
        print(f"{name:38s} " + " ".join(f"{r:<11.3f}" for r in recall) + f"  {all_hit:.3f}")
    seconds = belief_round_seconds(1000, 2000)
    print(f"belief update + Thompson draw, 1,000 pages: {seconds * 1e6:.1f} us per round")
    loop_name = variants[0][0]
    print(f"recall_gain_vs_distinct_budget={final[loop_name] - final[static[1]]:.4f}")
    print(f"recall_gain={final[loop_name] - final[static[0]]:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
