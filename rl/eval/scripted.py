"""``ragym rollout``: scripted-policy episodes on each row's env, printing mean episode metrics.

The policies are the env's: ``--policy expert`` plays the expert its hooks register (``EnvHooks.expert``), any
other name one of its ``EnvHooks.policies`` (KB-VQA's ``signature``, ``oracle``, ``random``), each played by
``ragym.envs.scripted.run_episode``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ragym.envs.events import events_of
from ragym.envs.hooks import MissingHook, env_hooks, hook, one_env_per_hooks
from ragym.envs.metrics import episode_metrics, mean_metrics
from ragym.envs.scripted import run_episode
from ragym.rewards.answers import PAPER_TIME_YEAR_TOLERANCE, answer_data_sources, score_answer
from ragym.rl.errors import UsageError
from ragym.rl.recipe.overrides import parse_overrides


def expert_of(env_id: str, env: Any) -> Any:
    """The scripted expert ``env_id``'s hooks register (``EnvHooks.expert``), a usage error where none is."""
    try:
        return hook(env_id, "expert", "ragym rollout --policy expert")(env, 0)
    except MissingHook as err:
        raise UsageError(str(err)) from None


def policy_of(env_id: str, env: Any, name: str) -> Any:
    """``ragym rollout --policy NAME`` on ``env``: the expert (``expert``) or the policy ``name`` among
    ``env_id``'s ``EnvHooks.policies``; a usage error naming the policies ``env_id`` has where it has no such one."""
    if name == "expert":
        return expert_of(env_id, env)
    policies = env_hooks(env_id).policies or {}
    if name not in policies:
        has = ", ".join(sorted(policies)) or "none"
        raise UsageError(
            f"{env_id} has no scripted policy {name!r} (its policies: {has}; expert: the expert its "
            "hooks register)"
        )
    return policies[name](env, 0)


def policy_names() -> str:
    """Every env's policies, for ``--policy``'s help: ``kbvqa: oracle, random, signature``."""
    hooked = [env_hooks(env_id) for env_id in one_env_per_hooks("policies")]
    return "; ".join(f"{h.name}: {', '.join(sorted(h.policies or {}))}" for h in hooked)


def rollout_metrics(
    env_id: str, events: list[dict[str, Any]], data_source: str, ground_truth: Any
) -> dict[str, float | None]:
    """The episode metrics (``ragym.envs.metrics``) plus ``answer_acc``: the answer scored like the outcome reward
    (None for a data source without an answer metric, e.g. a ranking task's)."""
    answers = events_of(events, "answer")
    answer = answers[0]["text"] if answers else None
    accuracy = (
        score_answer(data_source, answer, ground_truth, time_year_tolerance=PAPER_TIME_YEAR_TOLERANCE)
        if data_source in answer_data_sources()
        else None
    )
    return {**episode_metrics(env_id, events), "answer_acc": accuracy}


class RowEnvs:
    """One env and policy per distinct (env id, env kwargs) among the rows: each row runs on its own KB.

    A mixed rows file (``ragym prep mix``) holds rows of several KBs; as ``ragym eval``'s agent loop does,
    every row's env is built from its own ``env_kwargs``, then ``--kb-dir`` (when given) and the command
    line's overrides.
    """

    def __init__(self, policy: str, kb_dir: str | None, overrides: dict[str, Any], traced: bool):
        self.policy, self.kb_dir, self.overrides, self.traced = policy, kb_dir, overrides, traced
        self.built: dict[str, tuple[str, Any, Any]] = {}
        self.kb_dirs: set[str] = set()

    def for_row(self, row: dict[str, Any]) -> tuple[str, Any, Any]:
        """``(env_id, env, policy)`` for ``row`` (the env wrapped in an ObservationLog when traced)."""
        from ragym import envs
        from ragym.rl.view.trace import ObservationLog

        kwargs = json.loads(row["extra_info"]["env_kwargs"])
        kwargs |= ({"kb_dir": self.kb_dir} if self.kb_dir else {}) | self.overrides
        # Settings (on the command line or in the row) that only a variant of the row's env takes need that
        # variant (KB-VQA's demo aids: KBVQA-Demo-v0); the row's env id otherwise.
        env_id = str(row["extra_info"]["env_id"])
        variant = env_hooks(env_id).env_for_kwargs
        env_id = (variant(kwargs) if variant else None) or env_id
        key = json.dumps([env_id, kwargs], sort_keys=True, default=str)
        if key not in self.built:
            env = envs.make_env(env_id, **kwargs)
            # the policy keeps the bare env; episodes run on the log
            policy = policy_of(env_id, env, self.policy)
            self.built[key] = (env_id, ObservationLog(env) if self.traced else env, policy)
            self.kb_dirs.add(str(kwargs.get("kb_dir")))
        return self.built[key]


def main(argv: list[str]) -> int:
    """``ragym rollout``: scripted-policy episodes on each row's env, printing mean episode metrics as JSON."""

    from ragym.rl.data.rows import BAD_ROW_POLICIES, load_rows
    from ragym.rl.view.trace import TraceConfig, TraceWriter

    parser = argparse.ArgumentParser(prog="ragym rollout", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "--kb-dir",
        help="KB folder for every row (default: each row's own; without --data, "
        "the built-in synthetic preset's)",
    )
    parser.add_argument("--preset", default="demo", help="synthetic preset when --kb-dir is not given")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data", help="verl parquet rows (default: the KB's data/SPLIT.parquet)")
    parser.add_argument(
        "--bad-rows",
        default="skip",
        choices=BAD_ROW_POLICIES,
        help="rows that cannot start an episode: list and skip them (default), or stop",
    )
    parser.add_argument(
        "--policy",
        default="signature",
        help=f"a scripted policy of the rows' env ({policy_names()}), or expert: the scripted "
        "expert each row's env registers (any env)",
    )
    parser.add_argument(
        "--episodes", type=int, default=50, help="one episode on each of the first N rows (>= 1)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="env config overrides of the rows' env_kwargs, e.g. max_turns=6",
    )
    parser.add_argument(
        "--show-signature", action="store_true", help="shorthand for show_visual_signature=true"
    )
    parser.add_argument("--out", help="also write the episodes to OUT/traces for ragym view")
    args = parser.parse_args(argv)
    # 0 printed a summary of no episodes and a negative count quietly ran every row.
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    kwargs = parse_overrides(args.overrides) | (
        {"show_visual_signature": True} if args.show_signature else {}
    )
    if not args.kb_dir and not args.data:
        from ragym.data_prep.synthetic_kb import cached_kb

        args.kb_dir = str(cached_kb(args.preset))
    data = args.data or f"{args.kb_dir}/data/{args.split}.parquet"
    # valid rows only; the bad ones are listed
    rows = load_rows(data, args.episodes, args.bad_rows).rows
    writer = TraceWriter(f"{args.out}/traces", None, TraceConfig()) if args.out else None
    row_envs = RowEnvs(args.policy, args.kb_dir, kwargs, traced=writer is not None)
    results = []
    for i, row in enumerate(rows):
        env_id, env, policy = row_envs.for_row(row)
        episode = run_episode(env, policy, args.seed + i, json.loads(row["extra_info"]["env_options"]))
        truth = json.loads(row["reward_model"]["ground_truth"])
        results.append(rollout_metrics(env_id, episode["events"], row["data_source"], truth))
        if writer is not None:
            writer.record_scripted(
                dict(row), episode, env.observations, float(results[-1]["answer_acc"] or 0.0)
            )
    summary = {k: (None if v is None else round(v, 4)) for k, v in mean_metrics(results).items()}
    kb_dirs = sorted(row_envs.kb_dirs)
    kb_dir = kb_dirs[0] if len(kb_dirs) == 1 else kb_dirs  # a mixed rows file runs on several KBs
    print(json.dumps({"policy": args.policy, "episodes": len(results), "kb_dir": kb_dir, **summary}))
    return 0
