"""``ragym memora-baseline``: the paper's fixed pipeline on MEMORA-v0 rows, scored like a trained policy.

    ragym memora-baseline --data OUT/data/test.parquet --warmup OUT/data/warmup.parquet --out runs/memora_bio
        [--limit N] [--num-factors N]
        [--model scripted | openai --base-url URL --llm-model gpt-4o --api-key-env OPENAI_API_KEY --cache FILE]
    ragym memora-baseline --synthetic 160 --out runs/memora_syn     # the built-in synthetic domain's stream

The memory protocol is the paper's (section 5.3): the warm-up rows (``--warmup``; with ``--synthetic N`` the
stream's chronological first 80%) are played first and write the domain memory; then the memory is frozen and
only the held-out rows are played and scored, so no held-out query reads a held-out episode, its own
included. A held-out query that is also a warm-up query is an error. Rows that share ``env_kwargs`` (memory
freeze aside) share one env, so a domain's memory carries from warm-up to test even without ``memory_dir``.
With ``--num-factors`` outside the env's K_min..K_max (N = 1 of the paper's Fig. 3) the env's bounds are
widened to admit N, and ``metrics.json`` records it.

Writes ``OUT/episodes.jsonl`` (the held-out episodes; ``ragym score`` reads it) and ``OUT/metrics.json`` (mean
episode metrics from ``ragym.envs.metrics``, the memora reward recipe's terms, LLM calls per query and the split),
and prints the headline: nDCG@10 beside the first stage's, actions, LLM calls per query and memory hits.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragym.envs.memora.models import GENERIC_FACETS, ScriptedModel
from ragym.envs.memora.pipeline import MemoraPipeline, PipelineConfig
from ragym.envs.memora.synthetic import FACETS
from ragym.envs.metrics import episode_metrics, mean_metrics
from ragym.envs.registry import make_env
from ragym.rewards import Episode, Rubric
from ragym.rl.eval.memora_llm import LLMConfig, OpenAIChatModel

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "rewards" / "memora.yaml"


WARMUP_FRACTION = 0.8
"""Share of the synthetic stream that warms the memory up (the paper's chronological 80%)."""


def synthetic_rows(count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first ``count`` queries of the built-in synthetic domain as rows, split chronologically into
    (warm-up, held-out) at ``WARMUP_FRACTION`` (env defaults, in-env memory)."""
    from ragym.envs.memora.corpus import synthetic_collection

    domain = synthetic_collection(0)[0]
    rows = []
    for i, q in enumerate(domain.queries[:count]):
        options = {"query": q["query"], "query_id": q["id"], "domain": domain.name, "qrels": q["qrels"]}
        rows.append(
            {
                "data_source": "synthetic_memora",
                "index": i,
                "env_id": "MEMORA-v0",
                "env_kwargs": {},
                "options": options,
                "truth": {"qrels": q["qrels"], "excluded_ids": []},
            }
        )
    num_warmup = int(WARMUP_FRACTION * len(rows))
    return rows[:num_warmup], rows[num_warmup:]


def parquet_rows(path: Path, limit: int | None) -> list[dict[str, Any]]:
    """MEMORA-v0 rows of a verl parquet file (``ragym prep bright|mm-bright``)."""
    import pandas as pd

    rows = []
    for record in pd.read_parquet(path).to_dict("records")[:limit]:
        extra = dict(record["extra_info"])
        rows.append(
            {
                "data_source": record["data_source"],
                "index": int(extra["index"]),
                "env_id": extra["env_id"],
                "env_kwargs": json.loads(extra["env_kwargs"]),
                "options": json.loads(extra["env_options"]),
                "truth": json.loads(record["reward_model"]["ground_truth"]),
            }
        )
    return rows


def check_held_out(warmup: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """Refuse held-out rows that are also warm-up rows: their own labels would be in the memory."""
    seen = {r["options"].get("query_id") or r["options"]["query"] for r in warmup}
    both = sorted(
        str(q) for q in {r["options"].get("query_id") or r["options"]["query"] for r in rows} & seen
    )
    if both:
        raise ValueError(
            f"{len(both)} held-out queries are also warm-up queries (e.g. {both[:3]}): split the rows"
        )


class EnvPool:
    """One env per (env id, env kwargs without the memory freeze), its bounds widened to admit N factors."""

    def __init__(self, num_factors: int) -> None:
        self.num_factors = num_factors
        self.envs: dict[tuple[str, str], Any] = {}
        self.overrides: dict[str, Any] = {}
        self.frozen = False

    def get(self, row: dict[str, Any]) -> Any:
        """The row's env (built on first use; the memory writable until ``freeze``)."""
        kwargs = {k: v for k, v in row["env_kwargs"].items() if k != "memory_frozen"}
        key = (row["env_id"], json.dumps(kwargs, sort_keys=True))
        if key not in self.envs:
            env: Any = make_env(row["env_id"], **kwargs)  # MEMORA's env (make_env's type is gymnasium's Env)
            c, n = env.config, self.num_factors
            if not c.k_min <= n <= c.k_max:
                self.overrides = {"k_min": min(c.k_min, n), "k_max": max(c.k_max, n)}
                env = make_env(row["env_id"], **kwargs, **self.overrides)
            if self.frozen:  # first met in the held-out phase
                env.freeze_memory()
            self.envs[key] = env
        return self.envs[key]

    def freeze(self) -> None:
        """The held-out phase: every env, built or still to build, reads its memory without writing it."""
        self.frozen = True
        for env in self.envs.values():
            env.freeze_memory()


def run(
    rows: list[dict[str, Any]], pipeline: MemoraPipeline, out: Path, warmup: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """Play the warm-up rows (memory written), freeze the memory, play and score the held-out rows; write
    episodes and metrics, return the summary."""
    check_held_out(list(warmup), rows)
    rubric, envs = Rubric.from_recipe(RECIPE), EnvPool(pipeline.config.num_factors)
    per_episode, scores, calls = [], [], []
    for row in warmup:
        pipeline.play(envs.get(row), row["options"], seed=row["index"])
    envs.freeze()
    out.mkdir(parents=True, exist_ok=True)
    with (out / "episodes.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            info = pipeline.play(envs.get(row), row["options"], seed=row["index"])
            episode = Episode(
                row["data_source"], info["turns"], info["events"], row["truth"], extra={"index": row["index"]}
            )
            f.write(episode.to_json() + "\n")
            per_episode.append(episode_metrics(row["env_id"], info["events"]))
            result = rubric.score(episode)
            scores.append({**result.metrics(), "reward/total": result.total})
            calls.append({f"llm_calls/{k}": float(v) for k, v in info["llm_calls"].items()})
    summary = {
        "num_episodes": len(rows),
        "num_warmup_episodes": len(warmup),
        "memory": "written by the warm-up rows, then frozen for the held-out rows",
        "env_overrides": envs.overrides,
        "episode": mean_metrics(per_episode),
        "reward": mean_metrics(scores),
        "llm_calls": mean_metrics(calls),
    }
    (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str]) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        prog="ragym memora-baseline", description=(__doc__ or "").partition("\n")[0]
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="MEMORA-v0 parquet rows")
    source.add_argument(
        "--synthetic", type=int, metavar="N", help="the synthetic domain's first N queries (80/20 split)"
    )
    parser.add_argument("--warmup", type=Path, help="MEMORA-v0 parquet rows that write the memory first")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, help="only the first N held-out rows")
    parser.add_argument("--model", choices=("scripted", "openai"), default="scripted")
    parser.add_argument("--base-url", default=LLMConfig.chat.base_url)
    parser.add_argument("--llm-model", default=LLMConfig.chat.model)
    parser.add_argument("--api-key-env", help="name of the environment variable holding the API key")
    parser.add_argument("--cache", help="JSON-lines answer cache (default OUT/llm_cache.jsonl)")
    parser.add_argument("--num-factors", type=int, default=PipelineConfig.num_factors)
    args = parser.parse_args(argv)
    if args.synthetic and args.warmup:
        parser.error("--warmup goes with --data; --synthetic splits its own stream")
    if args.model == "openai":
        key = os.environ[args.api_key_env] if args.api_key_env else None
        cache = args.cache or str(args.out / "llm_cache.jsonl")
        chat = replace(
            LLMConfig.chat, base_url=args.base_url, model=args.llm_model, api_key=key, cache_path=cache
        )
        model = OpenAIChatModel(LLMConfig(chat))
    else:
        model = ScriptedModel(facets=FACETS if args.synthetic else GENERIC_FACETS)
    if args.synthetic:
        warmup, rows = synthetic_rows(args.synthetic)
    else:
        warmup = parquet_rows(args.warmup, None) if args.warmup else []
        rows = parquet_rows(args.data, args.limit)
    pipeline = MemoraPipeline(model, PipelineConfig(num_factors=args.num_factors))
    summary = run(rows, pipeline, args.out, warmup)
    e, r = summary["episode"], summary["reward"]
    print(
        json.dumps(
            {
                "episodes": summary["num_episodes"],
                "warmup_episodes": summary["num_warmup_episodes"],
                "ndcg@10": r["reward/ndcg"],
                "first_stage_ndcg@10": r["reward/first_stage_ndcg"],
                "actions": e["actions"],
                "llm_calls": summary["llm_calls"]["llm_calls/total"],
                "memory_hits": e["memory_hits"],
                "reward": r["reward/total"],
            }
        )
    )
    return 0
