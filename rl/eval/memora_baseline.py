"""``ragym memora-baseline``: the paper's fixed pipeline on MEMORA-v0 rows, scored like a trained policy.

    ragym memora-baseline --data OUT/data/test.parquet --out runs/memora_bio [--limit N]
        [--model scripted | openai --base-url URL --llm-model gpt-4o --api-key-env OPENAI_API_KEY --cache FILE]
    ragym memora-baseline --synthetic 40 --out runs/memora_syn     # the built-in synthetic domain's stream

Each row runs one episode through the same env, parser, events and rewards a policy gets (rows that share
``env_kwargs`` share one env, so a domain's memory persists across them even without ``memory_dir``).
Writes ``OUT/episodes.jsonl`` (``ragym score`` reads it) and ``OUT/metrics.json`` (mean episode metrics from
``envs.metrics`` and the memora reward recipe's terms), and prints the headline: nDCG@10 beside the first
stage's, actions per episode and memory hits.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from envs.memora_synthetic import FACETS
from envs.metrics import episode_metrics, mean_metrics
from envs.registry import make_env
from rewards import Episode, Rubric
from rl.eval.memora_models import GENERIC_FACETS, LLMConfig, ScriptedModel
from rl.eval.memora_pipeline import MemoraPipeline, PipelineConfig

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "rewards" / "memora.yaml"


def synthetic_rows(count: int) -> list[dict[str, Any]]:
    """The first ``count`` queries of the built-in synthetic domain as rows (env defaults, in-env memory)."""
    from envs.memora_corpus import synthetic_collection

    domain = synthetic_collection(0)[0]
    rows = []
    for i, q in enumerate(domain.queries[:count]):
        options = {"query": q["query"], "query_id": q["id"], "domain": domain.name, "qrels": q["qrels"]}
        rows.append({"data_source": "synthetic_memora", "index": i, "env_id": "MEMORA-v0", "env_kwargs": {},
                     "options": options, "truth": {"qrels": q["qrels"], "excluded_ids": []}})  # fmt: skip
    return rows


def parquet_rows(path: Path, limit: int | None) -> list[dict[str, Any]]:
    """MEMORA-v0 rows of a verl parquet file (``ragym prep bright|mm-bright``)."""
    import pandas as pd

    rows = []
    for record in pd.read_parquet(path).to_dict("records")[:limit]:
        extra = dict(record["extra_info"])
        rows.append({"data_source": record["data_source"], "index": int(extra["index"]), "env_id": extra["env_id"],
                     "env_kwargs": json.loads(extra["env_kwargs"]), "options": json.loads(extra["env_options"]),
                     "truth": json.loads(record["reward_model"]["ground_truth"])})  # fmt: skip
    return rows


def run(rows: list[dict[str, Any]], pipeline: MemoraPipeline, out: Path) -> dict[str, Any]:
    """Play every row, write episodes and metrics, return the summary."""
    rubric, envs_by_kwargs, per_episode, scores = Rubric.from_recipe(RECIPE), {}, [], []
    out.mkdir(parents=True, exist_ok=True)
    with (out / "episodes.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            key = (row["env_id"], json.dumps(row["env_kwargs"], sort_keys=True))
            if key not in envs_by_kwargs:
                envs_by_kwargs[key] = make_env(row["env_id"], **row["env_kwargs"])
            info = pipeline.play(envs_by_kwargs[key], row["options"], seed=row["index"])
            episode = Episode(
                row["data_source"], info["turns"], info["events"], row["truth"], extra={"index": row["index"]}
            )
            f.write(episode.to_json() + "\n")
            per_episode.append(episode_metrics(row["env_id"], info["events"]))
            result = rubric.score(episode)
            scores.append({**result.metrics(), "reward/total": result.total})
    summary = {
        "num_episodes": len(rows),
        "episode": mean_metrics(per_episode),
        "reward": mean_metrics(scores),
    }
    (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str]) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="ragym memora-baseline", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="MEMORA-v0 parquet rows")
    source.add_argument("--synthetic", type=int, metavar="N", help="the synthetic domain's first N queries")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--model", choices=("scripted", "openai"), default="scripted")
    parser.add_argument("--base-url", default=LLMConfig.base_url)
    parser.add_argument("--llm-model", default=LLMConfig.model)
    parser.add_argument("--api-key-env", help="name of the environment variable holding the API key")
    parser.add_argument("--cache", help="JSON-lines answer cache (default OUT/llm_cache.jsonl)")
    parser.add_argument("--num-factors", type=int, default=PipelineConfig.num_factors)
    args = parser.parse_args(argv)
    if args.model == "openai":
        from rl.eval.memora_llm import OpenAIChatModel

        key = os.environ[args.api_key_env] if args.api_key_env else None
        cache = args.cache or str(args.out / "llm_cache.jsonl")
        model = OpenAIChatModel(
            LLMConfig(base_url=args.base_url, model=args.llm_model, api_key=key, cache_path=cache)
        )
    else:
        model = ScriptedModel(facets=FACETS if args.synthetic else GENERIC_FACETS)
    rows = synthetic_rows(args.synthetic) if args.synthetic else parquet_rows(args.data, args.limit)
    summary = run(rows, MemoraPipeline(model, PipelineConfig(num_factors=args.num_factors)), args.out)
    e, r = summary["episode"], summary["reward"]
    print(json.dumps({"episodes": summary["num_episodes"], "ndcg@10": r["reward/ndcg"],
                      "first_stage_ndcg@10": r["reward/first_stage_ndcg"], "actions": e["actions"],
                      "memory_hits": e["memory_hits"], "reward": r["reward/total"]}))  # fmt: skip
    return 0
