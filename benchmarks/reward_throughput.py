"""Reward throughput: episodes scored per second on synthetic KB-VQA episodes, per term and end to end.

    python benchmarks/reward_throughput.py [--episodes 10000] [--env-episodes 200]

Prints the rate of the paper's recipe through ``Rubric.score`` and through verl's ``compute_score`` seam,
each term alone, the baseline cost of decoding the same episodes from jsonl (measured in the same run),
and the rollout rate of the real ``KBVQA-v0`` env with a scripted policy for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragym.rewards import Episode, Rubric  # noqa: E402
from ragym.rewards.verl import compute_score  # noqa: E402
from tests.rewards.synthetic import synthetic_episode  # noqa: E402

RECIPE = REPO / "recipes" / "rewards" / "mmagent_r2.yaml"


def rate(label: str, n: int, fn: Callable[[], object]) -> float:
    """Run ``fn`` once over ``n`` items and print items per second."""
    start = time.perf_counter()
    fn()
    per_second = n / (time.perf_counter() - start)
    print(f"{label:<44} {per_second:>12,.0f} episodes/s")
    return per_second


def env_rollout_rate(num_episodes: int) -> float | None:
    """Episodes per second of KBVQA-v0 with a scripted SearchImage / Rerank-first / Answer policy."""
    try:
        from ragym.envs.kbvqa.actions import Answer, Rerank, SearchImage, format_action
        from ragym.envs.registry import make_env
    except ImportError as err:
        print(f"env rollout rate skipped: {err}")
        return None
    env = make_env("KBVQA-v0")

    def rollouts() -> None:
        for seed in range(num_episodes):
            env.reset(seed=seed)
            for image in range(1, env.state.num_images + 1):
                env.step(format_action(SearchImage(image), "r"))
                batch = env.state.current.get(image)
                if batch is not None:
                    env.step(format_action(Rerank(batch.names[0]), "r"))
            if not env.state.done:
                env.step(format_action(Answer("x"), "r"))

    return rate(f"env rollouts (KBVQA-v0, {num_episodes} scripted)", num_episodes, rollouts)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--env-episodes", type=int, default=200)
    args = parser.parse_args(argv)

    episodes = [synthetic_episode(seed, num_images=1 + seed % 3) for seed in range(args.episodes)]
    lines = [ep.to_json() for ep in episodes]
    rubric = Rubric.from_recipe(RECIPE)
    verl_args = [
        (
            ep.data_source,
            json.dumps(ep.ground_truth),
            {"events": ep.events, "turns": ep.turns, "truncated": ep.truncated},
        )
        for ep in episodes
    ]
    n = len(episodes)
    print(
        f"{n} synthetic episodes, {sum(len(e.events) for e in episodes) / n:.1f} events and "
        f"{sum(len(e.turns) for e in episodes) / n:.1f} turns each; recipe {RECIPE.name}"
    )
    baseline = rate(
        "baseline: decode jsonl -> Episode", n, lambda: [Episode.from_dict(json.loads(s)) for s in lines]
    )
    for term in rubric.terms:
        rate(f"term {term.name}", n, lambda t=term: [t.fn(ep, **t.params) for ep in episodes])
    full = rate("Rubric.score (all terms)", n, lambda: [rubric.score(ep) for ep in episodes])
    seam = rate(
        "ragym.rewards.verl.compute_score (verl seam)",
        n,
        lambda: [compute_score(ds, "", gt, extra, recipe_path=str(RECIPE)) for ds, gt, extra in verl_args],
    )
    print(f"ratio Rubric.score / jsonl decode = {full / baseline:.2f} (>1: scoring is cheaper than decoding)")
    print(f"ratio compute_score / Rubric.score = {seam / full:.2f}")
    env_rate = env_rollout_rate(args.env_episodes) if args.env_episodes > 0 else None
    if env_rate:
        print(f"ratio compute_score / env rollouts = {seam / env_rate:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
