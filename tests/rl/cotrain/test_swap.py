"""In process: a swap reaches every env on the KB at its next search, and episodes record the version."""

from __future__ import annotations

from pathlib import Path

from ragym.envs.events import events_of
from ragym.envs.kbvqa.harvest import harvest_episode
from ragym.envs.kbvqa.policies import OraclePolicy
from ragym.envs.registry import make_env, synthetic_data
from ragym.envs.retrieval.versions import load_query_encoder
from ragym.rl.eval.scripted import run_episode
from tests.rl.cotrain.helpers import options, tiny_rows, weak_encoder


def test_episodes_record_the_version_that_searched_and_a_swap_reaches_live_envs(tmp_path: Path) -> None:
    env = make_env("KBVQA-v0", kb_dir=synthetic_data("kbvqa", "tiny"), candidate_source="live")
    row = options(tiny_rows("train")[0])
    slot = env.unwrapped.kb.query_slot
    try:
        plain = run_episode(env, OraclePolicy(env), 0, row)["events"]
        assert {e["retriever_version"] for e in events_of(plain, "search_image")} == {None}
        slot.swap(load_query_encoder(weak_encoder(tmp_path / "weak")))
        other = make_env("KBVQA-v0", kb_dir=synthetic_data("kbvqa", "tiny"), candidate_source="live")
        for episode_env in (env, other):  # the env built before the swap and one built after it
            events = run_episode(episode_env, OraclePolicy(episode_env), 0, row)["events"]
            assert {e["retriever_version"] for e in events_of(events, "search_image")} == {"weak"}
        # the oracle verifies against the gold: its confirmations are positives, its rejections negatives
        harvest = harvest_episode(events, row)
        assert harvest.unverified == 0 and harvest.positives + harvest.negatives > 0
    finally:
        slot.swap(None)
