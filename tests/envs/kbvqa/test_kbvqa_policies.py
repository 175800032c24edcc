"""KB-VQA's scripted policies (``ragym.envs.kbvqa.policies``) on the demo KB: what each solves, and its errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from ragym import envs
from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.envs.kbvqa.policies import POLICIES
from ragym.envs.scripted import run_episode
from ragym.rl.eval.scripted import rollout_metrics


@pytest.fixture(scope="module")
def demo_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_kb(tmp_path_factory.mktemp("kb") / "demo", replace(PRESETS["demo"], num_rows=60), seed=0)


def run(kb: Path, policy: str, env_id: str = "KBVQA-Demo-v0", **env_kwargs) -> list[dict]:
    """Metrics of 30 episodes of ``env_id`` built from ``env_kwargs`` alone (the demo env: only the aids given)."""
    env = envs.make_env(env_id, kb_dir=str(kb), **env_kwargs)
    rows = pd.read_parquet(kb / "data" / "train.parquet").head(30)
    agent, out = POLICIES[policy](env, 0), []
    for i, row in rows.iterrows():
        episode = run_episode(env, agent, i, json.loads(row["extra_info"]["env_options"]))
        truth = json.loads(row["reward_model"]["ground_truth"])
        out.append(rollout_metrics(env_id, episode["events"], row["data_source"], truth))
    return out


def mean(results: list[dict], key: str) -> float:
    return sum(r[key] for r in results) / len(results)


def test_signature_policy_solves_what_retrieval_makes_reachable(demo_kb: Path) -> None:
    with_sig = run(demo_kb, "signature", show_visual_signature=True, candidates_per_batch=3)
    without = run(demo_kb, "signature", "KBVQA-v0", candidates_per_batch=3)  # the paper env: top-1
    assert mean(with_sig, "verification_acc") == 1.0  # signatures make every decision readable
    assert mean(with_sig, "ident_acc") > mean(without, "ident_acc")
    assert mean(with_sig, "rejections") > 0
    assert mean(with_sig, "answer_acc") == mean(with_sig, "ident_acc")  # the passage gives the answer
    assert mean(with_sig, "format_errors") == mean(with_sig, "protocol_violations") == 0


def test_oracle_matches_signature_policy_and_random_policy_errs(demo_kb: Path) -> None:
    oracle = run(demo_kb, "oracle", "KBVQA-v0", candidates_per_batch=3)
    signature = run(demo_kb, "signature", show_visual_signature=True, candidates_per_batch=3)
    assert mean(oracle, "ident_acc") == mean(signature, "ident_acc")
    randomly = run(demo_kb, "random", "KBVQA-v0")
    assert mean(randomly, "format_errors") > 0 and mean(randomly, "protocol_violations") > 0


@pytest.mark.parametrize(
    "flags",
    [
        {"candidates_per_batch": 1, "rerank_by_index": True},  # the demo preset
        {"candidates_per_batch": 3, "rerank_by_index": True},
        {"candidates_per_batch": 3},  # names
    ],
)
def test_signature_policy_acts_on_the_visual_check_in_every_rerank_form(demo_kb: Path, flags: dict) -> None:
    checked = run(demo_kb, "signature", visual_check=True, **flags)
    oracle = run(demo_kb, "oracle", **flags)
    assert mean(checked, "verification_acc") == 1.0  # signatures hidden: only the check can tell
    assert mean(checked, "ident_acc") == mean(oracle, "ident_acc") > 0
    assert mean(checked, "protocol_violations") == mean(checked, "format_errors") == 0


def test_signature_policy_without_the_reject_action_moves_on_instead(demo_kb: Path) -> None:
    """Table 5's "w/o Reject": the policy never writes Reject(), so it makes no format error, and it
    identifies only what the first batch holds (what Rej_max = 0 with Reject offered also reaches)."""
    flags = {"visual_check": True, "candidates_per_batch": 3, "max_rejections": 0}
    without = run(demo_kb, "signature", allow_reject=False, **flags)
    offered = run(demo_kb, "signature", **flags)
    assert mean(without, "format_errors") == mean(without, "protocol_violations") == 0
    assert mean(without, "actions/reject") == 0 < mean(offered, "actions/reject")
    assert mean(without, "ident_acc") == mean(offered, "ident_acc")
    assert mean(offered, "rejections") == 0  # every Reject at Rej_max = 0 is at the limit
    assert mean(offered, "rejects_at_limit") == mean(offered, "actions/reject")
