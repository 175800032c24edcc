"""MEMORA-v0 memory depth (the paper's Table 5 shape) on the synthetic domain, CPU only.

Each domain's query stream is split chronologically: the first 80% is the warm-up pool, the last 20% the
held-out test queries (section 5.3). For each memory depth d the scripted fixed pipeline plays the first d
warm-up queries with memory writes on, then the memory is frozen and the test queries are scored
(nDCG@10 of the env's final ranking). Depth 0 is the pipeline without memory; the baseline measured in the
same run is the first stage (BM25) on the same test queries. The last row keeps the deepest memory but
stops routing it to decomposition (the scripted model ignores the memory summary), as in Table 6.

    python benchmarks/memora_memory.py [--seeds 0 1 2] [--depths 0 5 10 25 50 100 128]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ragym.envs.events import events_of
from ragym.envs.memora.env import MemoraEnv
from ragym.envs.memora.models import ScriptedModel
from ragym.envs.memora.pipeline import MemoraPipeline
from ragym.envs.memora.synthetic import FACETS, SyntheticConfig, synthetic_domain
from ragym.rewards.memora import ranking_ndcg


def run(seed: int, depth: int, use_memory: bool = True) -> tuple[float, float, float, float]:
    """(first-stage nDCG@10, final nDCG@10, actions, LLM calls per episode) on the held-out 20% after
    ``depth`` warm-ups."""
    domain = synthetic_domain(SyntheticConfig(seed=seed))
    env = MemoraEnv(synthetic_seed=seed)  # the same synthetic domain, BM25 first stage
    pipeline = MemoraPipeline(ScriptedModel(facets=FACETS, use_memory=use_memory))
    split = int(0.8 * len(domain.queries))
    if depth > split:
        raise ValueError(f"depth {depth} exceeds the warm-up pool ({split} queries)")
    for q in domain.queries[:depth]:
        pipeline.play(
            env, {"query": q["query"], "qrels": q["qrels"], "domain": domain.name, "query_id": q["id"]}
        )
    env.freeze_memory()
    first, final, actions, calls = [], [], [], []
    for q in domain.queries[split:]:
        options = {"query": q["query"], "qrels": q["qrels"], "domain": domain.name, "query_id": q["id"]}
        info = pipeline.play(env, options)
        calls.append(info["llm_calls"]["total"])
        events = info["events"]
        first.append(ranking_ndcg(events_of(events, "first_stage")[0]["ranking"], q["qrels"], set(), 10))
        final.append(ranking_ndcg(events_of(events, "final_ranking")[0]["ranking"], q["qrels"], set(), 10))
        actions.append(len(events_of(events, "action")))
    return float(np.mean(first)), float(np.mean(final)), float(np.mean(actions)), float(np.mean(calls))


def main() -> None:
    """Print the depth table (mean over seeds, with the per-seed values)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--depths", type=int, nargs="+", default=[0, 5, 10, 25, 50, 100, 128])
    args = parser.parse_args()
    start = time.perf_counter()
    base = [run(s, 0)[0] for s in args.seeds]
    print(
        f"first stage (BM25) nDCG@10 on the held-out queries: {np.mean(base):.3f}  per seed {np.round(base, 3).tolist()}"
    )
    print(
        "| warm-up episodes | nDCG@10 | gain over no memory | x first stage | actions/episode "
        "| LLM calls/query | per seed |"
    )
    print("|---|---|---|---|---|---|---|")
    no_memory = None
    rows = [(d, True) for d in args.depths] + [(max(args.depths), False)]
    for depth, use_memory in rows:
        results = [run(s, depth, use_memory) for s in args.seeds]
        ndcg = float(np.mean([r[1] for r in results]))
        no_memory = ndcg if no_memory is None else no_memory
        label = f"{depth}" if use_memory else f"{depth}, memory not routed to decomposition"
        print(
            f"| {label} | {ndcg:.3f} | {ndcg - no_memory:+.3f} | {ndcg / np.mean(base):.2f} | "
            f"{np.mean([r[2] for r in results]):.1f} | {np.mean([r[3] for r in results]):.1f} | "
            f"{np.round([r[1] for r in results], 3).tolist()} |"
        )
    print(f"wall time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
