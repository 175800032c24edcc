"""Scripted KB-VQA policies and ``ragym rollout``: run them on a KB and print episode metrics.

Policies (each turns the env's observations into canonical turn texts):
- ``signature``: what the CPU demo policy should learn. Searches each image, reranks the candidate the env's
  visual check names (else the one whose visual signature matches the query's, else the top-1 candidate
  when signatures are hidden), rejects when none matches (without the Reject action, moves on), reads the
  confirmed entities' passages and extracts the answer. Uses no gold data.
- ``oracle``: reranks the gold entity when it is in the batch, else rejects (reads gold ids: an upper bound).
- ``random``: random actions, malformed text included (exercises every error path).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import numpy as np

from ragym.envs.events import events_of
from ragym.envs.hooks import MissingHook, env_hooks, hook
from ragym.envs.kbvqa.actions import Answer, Reject, Rerank, SearchImage, SearchText, format_action
from ragym.envs.kbvqa.demo import KBVQADemoEnv
from ragym.envs.kbvqa.prompts import LAST_TURN_NOTICE
from ragym.envs.metrics import episode_metrics, mean_metrics
from ragym.rewards.answers import PAPER_TIME_YEAR_TOLERANCE, answer_data_sources, score_answer
from ragym.rl.errors import UsageError
from ragym.rl.recipe.overrides import parse_overrides

_CANDIDATE = re.compile(r"^\[\d+\] <image> (.+?)(?: \(signature: ([^\s)]+)\))?$", re.MULTILINE)
_CHECK = re.compile(
    r"^Visual check: (.+) matches the query image\.$|^Visual check: no candidate", re.MULTILINE
)
_NUMBER = re.compile(r"^\[(\d+)\]$")
_HEADER = re.compile(r"^Candidates for Image (\d+)(?: \(signature: ([^\s)]+)\))?", re.MULTILINE)
_FACTS = {
    "year": re.compile(r"first recorded in (\d{4})"),
    "region": re.compile(r"region of (\w+)"),
    "who": re.compile(r"catalogued by (\w+)"),
}


class SignaturePolicy:
    """Search, verify by visual signature, read passages, answer; never looks at gold data."""

    def __init__(self, env: Any):
        self.env = env
        # KBVQA-Demo-v0 with rerank_by_index: Rerank names the candidate by its number in the batch.
        unwrapped = env.unwrapped
        self.by_index = isinstance(unwrapped, KBVQADemoEnv) and unwrapped.aids.rerank_by_index
        self.may_reject = unwrapped.config.allow_reject

    def reset(self, obs: dict[str, Any]) -> None:
        """Start an episode from the task observation."""
        self.num_images = len(obs["images"])
        self.question = obs["text"].rsplit("Question: ", 1)[-1]
        self.image, self.confirmed, self.passages = 1, {}, None

    def verify(self, obs_text: str, hits: list[tuple[str, str | None]], query_sig: str | None) -> str | None:
        """The candidate that matches the query image (its name), or None."""
        check = _CHECK.search(obs_text)
        if check:
            return _named(check.group(1), hits) if check.group(1) else None
        if query_sig is None:
            return hits[0][0] if hits else None
        return next((name for name, sig in hits if sig == query_sig), None)

    def choose(self, hits: list[tuple[str, str | None]], match: str | None) -> str | None:
        """The candidate to rerank given the verified ``match``, or None to reject (a hook for noisy experts)."""
        return match

    def act(self, obs_text: str) -> str:
        """The next turn text given the last observation."""
        if LAST_TURN_NOTICE in obs_text:
            self.passages = self.passages or obs_text
            return format_action(Answer(self._answer()), "no turns left")
        header = _HEADER.search(obs_text)
        if header:
            hits = [(m.group(1), m.group(2)) for m in _CANDIDATE.finditer(obs_text)]
            match = self.verify(obs_text, hits, header.group(2))
            name = self._chosen(hits, match)
            # The reason states what verification found, whatever the (possibly noisy) choice: a policy
            # imitating it reads the observation in its reason and decides right after.
            reason = "a candidate matches the query" if match else "no candidate matches the query"
            if name or self.may_reject:
                return format_action(Rerank(self._argument(name, hits)) if name else Reject(), reason)
            self.image += 1  # no Reject action (Table 5's "w/o Reject"): leave the image unconfirmed
        elif obs_text.startswith(("Confirmed:", "Rejection limit")):
            self.image += 1
        if obs_text.startswith("Results for"):
            self.passages = obs_text
            return format_action(Answer(self._answer()), "read the passages")
        if self.image <= self.num_images:
            return format_action(SearchImage(self.image), f"identify the entity in image {self.image}")
        names = list(self.confirmed.values())
        if names and self.passages is None:
            return format_action(SearchText(tuple(names)), "look up the confirmed entities")
        return format_action(Answer(self._answer()), "answer with what I have")

    def _chosen(self, hits: list[tuple[str, str | None]], match: str | None) -> str | None:
        name = self.choose(hits, match)
        if name:
            self.confirmed[self.image] = name
        return name

    def _argument(self, name: str, hits: list[tuple[str, str | None]]) -> str:
        """How the Rerank names the candidate: its number (``rerank_by_index``) or its name."""
        if self.by_index:
            return str([n for n, _ in hits].index(name) + 1)
        return name

    def _answer(self) -> str:
        facts = {}
        for name in self.confirmed.values():
            passage = re.search(rf"{re.escape(name)}: (.*)", self.passages or "")
            facts[name] = (
                {k: (m.group(1) if (m := p.search(passage.group(1))) else None) for k, p in _FACTS.items()}
                if passage
                else {}
            )
        if "earlier" in self.question:
            years = {n: int(f["year"]) for n, f in facts.items() if f.get("year")}
            return min(years, key=years.get) if years else "unknown"
        key = "year" if "year" in self.question else "region" if "region" in self.question else "who"
        return next((f[key] for f in facts.values() if f.get(key)), "unknown")


def _named(argument: str, hits: list[tuple[str, str | None]]) -> str | None:
    """The candidate a visual-check argument names: ``[N]`` or a name."""
    number = _NUMBER.match(argument)
    if number:
        index = int(number.group(1)) - 1
        return hits[index][0] if 0 <= index < len(hits) else None
    return next((name for name, _ in hits if argument == name), None)


class OraclePolicy(SignaturePolicy):
    """``SignaturePolicy`` that verifies with the gold entity instead of signatures (an upper bound)."""

    def verify(self, obs_text: str, hits: list[tuple[str, str | None]], query_sig: str | None) -> str | None:
        """The gold entity's name when it is in the batch, else None (reject)."""
        state = self.env.unwrapped.state
        batch = state.active_batch()
        gold = batch.gold_entity if batch else None
        return batch.name_of(gold) if gold in batch.candidates else None


class RandomPolicy:
    """Uniformly random actions, a share of them malformed."""

    def __init__(self, env: Any, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.env = env

    def reset(self, obs: dict[str, Any]) -> None:
        """Remember the image count."""
        self.num_images = len(obs["images"])

    def act(self, obs_text: str) -> str:
        """A random turn."""
        names = _CANDIDATE.findall(obs_text)
        options = [
            format_action(SearchImage(int(self.rng.integers(0, self.num_images + 2)))),
            format_action(SearchText(("first recorded",))),
            format_action(Rerank(names[int(self.rng.integers(len(names)))][0] if names else "Nobody")),
            format_action(Reject()),
            format_action(Answer("1900")),
            "<answer>no reason block</answer>",
            "<reason>nested <rerank>x</reason></rerank>",
        ]
        return options[int(self.rng.integers(len(options)))]


class OneTurn:
    """A scripted policy that ends the episode at once with one well-formed final action."""

    def __init__(self, text: str) -> None:
        self.text = text

    def reset(self, obs: dict[str, Any]) -> None:
        """Nothing to remember."""

    def act(self, obs_text: str) -> str:
        """The final action."""
        return self.text


POLICIES = {"signature": SignaturePolicy, "oracle": OraclePolicy, "random": RandomPolicy}


def run_episode(env: Any, policy: Any, seed: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One episode; returns the turn texts, final events and whether it was truncated."""
    obs, info = env.reset(seed=seed, options=options)
    policy.reset(obs)
    turns, done, truncated = [], False, False
    while not done:
        turns.append(policy.act(obs["text"]))
        obs, _, terminated, truncated, info = env.step(turns[-1])
        done = terminated or truncated
    return {"turns": turns, "events": info["events"], "truncated": truncated}


def expert_of(env_id: str, env: Any) -> Any:
    """The scripted expert ``env_id``'s hooks register (``EnvHooks.expert``), a usage error where none is."""
    try:
        return hook(env_id, "expert", "ragym rollout --policy expert")(env, 0)
    except MissingHook as err:
        raise UsageError(str(err)) from None


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
            policy = expert_of(env_id, env) if self.policy == "expert" else POLICIES[self.policy](env)
            self.built[key] = (env_id, ObservationLog(env) if self.traced else env, policy)
            self.kb_dirs.add(str(kwargs.get("kb_dir")))
        return self.built[key]


def main(argv: list[str]) -> int:
    """``ragym rollout``: scripted-policy episodes on a KB-VQA KB, printing mean episode metrics as JSON."""
    import pandas as pd

    from ragym.rl.data.rows import BAD_ROW_POLICIES, load_rows
    from ragym.rl.view.trace import TraceConfig, TraceWriter

    parser = argparse.ArgumentParser(prog="ragym rollout", description=__doc__.splitlines()[0])
    parser.add_argument("--kb-dir", help="KB folder for every row (default: each row's own; without --data, "
                        "the built-in synthetic preset's)")  # fmt: skip
    parser.add_argument("--preset", default="demo", help="synthetic preset when --kb-dir is not given")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data", help="verl parquet rows (default: the KB's data/SPLIT.parquet)")
    parser.add_argument("--bad-rows", default="skip", choices=BAD_ROW_POLICIES,
                        help="rows that cannot start an episode: list and skip them (default), or stop")  # fmt: skip
    parser.add_argument("--policy", default="signature", choices=sorted([*POLICIES, "expert"]),
                        help="a KB-VQA policy, or expert: the scripted expert each row's env registers (any env)")  # fmt: skip
    parser.add_argument("--episodes", type=int, default=50)
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
    kwargs = parse_overrides(args.overrides) | (
        {"show_visual_signature": True} if args.show_signature else {}
    )
    if not args.kb_dir and not args.data:
        from ragym.data_prep.synthetic_kb import cached_kb

        args.kb_dir = str(cached_kb(args.preset))
    data = args.data or f"{args.kb_dir}/data/{args.split}.parquet"
    # valid rows only; the bad ones are listed
    rows = pd.DataFrame(load_rows(data, args.episodes, args.bad_rows).rows)
    writer = TraceWriter(f"{args.out}/traces", None, TraceConfig()) if args.out else None
    row_envs = RowEnvs(args.policy, args.kb_dir, kwargs, traced=writer is not None)
    results = []
    for i, row in rows.iterrows():
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
