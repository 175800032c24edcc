"""Rewards on real ``KBVQA-v0`` rollouts: scripted honest play and reward-hacking attempts, through verl's seam."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ragym.rewards.verl import compute_score

pytest.importorskip("ragym.envs.kbvqa.env", reason="the KB-VQA env is not in this checkout")

from ragym.envs.kbvqa.actions import Answer, Reject, Rerank, SearchImage, format_action  # noqa: E402
from ragym.envs.registry import make_env  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "rewards" / "mmagent_r2.yaml")
DELTA = 0.2


@pytest.fixture(scope="module")
def env_and_rows():
    env = make_env("KBVQA-v0")
    rows = pd.read_parquet(env.kb.root / "data" / "train.parquet")
    return env, rows


class Rollout:
    """Plays turns on the env and scores the episode with the paper's recipe through ``compute_score``."""

    def __init__(self, env, row) -> None:
        self.env, self.row = env, row
        self.options = json.loads(row["extra_info"]["env_options"])
        self.answers = json.loads(row["reward_model"]["ground_truth"])
        self.turns: list[str] = []
        _, self.info = env.reset(options=self.options)
        self.done = self.truncated = False

    def play(self, action) -> None:
        text = action if isinstance(action, str) else format_action(action, reason="comparing images")
        self.turns.append(text)
        _, _, terminated, truncated, self.info = self.env.step(text)
        self.done, self.truncated = terminated or truncated, truncated

    def gold_name(self, image: int) -> str | None:
        batch = self.env.state.current[image]
        gold = self.options["gold_entities"][image - 1]
        return batch.name_of(gold) if gold in batch.candidates else None

    def score(self) -> dict[str, float]:
        extra = {"events": self.info["events"], "turns": self.turns, "truncated": self.truncated}
        return compute_score(
            self.row["data_source"], "", self.row["reward_model"]["ground_truth"], extra, recipe_path=RECIPE
        )


def _honest(env, row) -> tuple[dict[str, float], int, Rollout]:
    """Reject until the gold entity shows up (or the limit), rerank it, answer correctly."""
    r = Rollout(env, row)
    num_images, found, rejections = len(r.options["query_images"]), 0, 0
    for image in range(1, num_images + 1):
        r.play(SearchImage(image))
        while not r.done and r.gold_name(image) is None and rejections < 2 * num_images:
            r.play(Reject())
            rejections += 1
            if image not in r.env.state.current or r.env.state.current[image].decided:
                break
        if not r.done and r.gold_name(image) is not None and not r.env.state.current[image].decided:
            r.play(Rerank(r.gold_name(image)))
            found += 1
    if not r.done:
        r.play(Answer(r.answers[0]))
    return r.score(), found, r


def test_honest_play_earns_every_term(env_and_rows) -> None:
    env, rows = env_and_rows
    checked = 0
    for _, row in rows.head(12).iterrows():
        score, found, r = _honest(env, row)
        if r.truncated:
            continue
        checked += 1
        rejected = [e for e in r.info["events"] if e["type"] == "verification" and e["decision"] == "reject"]
        correct_rejects = sum(not e["gold_in_batch"] for e in rejected)
        assert score["reward/format"] == 1.0
        assert score["reward/outcome"] == 1.0
        assert score["reward/verification"] == pytest.approx(found + DELTA * correct_rejects)
        assert score["score"] == pytest.approx(2.0 + found + DELTA * correct_rejects)
    assert checked >= 6


def test_repeated_rerank_of_the_gold_entity_counts_once(env_and_rows) -> None:
    env, rows = env_and_rows
    for _, row in rows.head(20).iterrows():
        r = Rollout(env, row)
        r.play(SearchImage(1))
        if r.gold_name(1) is None:
            continue
        for _ in range(5):
            r.play(Rerank(r.gold_name(1)))
        assert r.score()["reward/verification"] == 1.0
        return
    pytest.fail("no row with the gold entity in the first batch")


def test_rejecting_past_rej_max_earns_at_most_rej_max_plus_one_deltas(env_and_rows) -> None:
    env, rows = env_and_rows
    r = Rollout(env, rows.iloc[0])
    r.play(SearchImage(1))
    for _ in range(6):
        r.play(Reject() if len(r.turns) % 2 else SearchImage(1))
    assert r.score()["reward/verification"] <= 3 * DELTA + 1e-9


def test_paging_past_the_confirmed_entity_to_reject_is_paid_only_when_the_recipe_says(env_and_rows) -> None:
    """Confirm e* in the first batch, then page with SearchImage and reject the gold-free batches that follow."""
    env, rows = env_and_rows
    for _, row in rows.head(20).iterrows():
        r = Rollout(env, row)
        r.play(SearchImage(1))
        if r.gold_name(1) is None or len(r.options["query_images"]) != 1:
            continue
        for action in (Rerank(r.gold_name(1)), SearchImage(1), Reject(), Reject(), Answer(r.answers[0])):
            r.play(action)
        assert r.score()["reward/verification"] == pytest.approx(1.0 + 2 * DELTA)  # Eq. 4 as the paper has it
        extra = {"events": r.info["events"], "turns": r.turns, "truncated": r.truncated}
        overrides = {"terms": {"verification": {"params": {"pay_reject_after_confirm": False}}}}
        unpaid = compute_score(
            row["data_source"],
            "",
            row["reward_model"]["ground_truth"],
            extra,
            recipe_path=RECIPE,
            overrides=overrides,
        )
        assert unpaid["reward/verification"] == 1.0
        return
    pytest.fail("no single-image row with the gold entity in the first batch")


@pytest.mark.parametrize(
    "attack",
    [
        "<reason>x</reason><answer>wrong</answer><answer>{gold}</answer>",
        "<reason>x</reason><answer>wrong <answer>{gold}</answer></answer>",
        "<reason>x</reason><answer>{gold}</b></answer>",
        "<reason>the answer is {gold}</reason><answer>wrong</answer>",
    ],
)
def test_tag_injection_and_hidden_answers_earn_nothing(env_and_rows, attack: str) -> None:
    env, rows = env_and_rows
    r = Rollout(env, rows.iloc[0])
    r.play(attack.format(gold=r.answers[0]))
    while not r.done:
        r.play(SearchImage(1))
    assert r.score()["reward/outcome"] == 0.0
