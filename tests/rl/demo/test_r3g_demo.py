"""The R3G demo's expert: grammar-valid turns, judge decisions readable from the captions, noise as documented."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragym.data_prep.r3g_synthetic import PRESETS, build_task
from ragym.envs.events import events_of
from ragym.envs.r3g.expert import R3GExpert
from ragym.envs.scripted import run_episode
from ragym.rl.demo.r3g import _corpus


@pytest.fixture(scope="module")
def demo_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_task(tmp_path_factory.mktemp("r3g") / "task", PRESETS["demo"], seed=0)


@pytest.fixture(scope="module")
def rows(demo_task: Path) -> list[dict]:
    return pd.read_parquet(demo_task / "data" / "train.parquet").head(40).to_dict("records")


def recall_at_1(rows: list[dict], noise: float) -> float:
    rng, hits = np.random.default_rng(0), []
    for row in rows:
        expert = R3GExpert.for_row(row, rng, noise)
        episode = run_episode(expert.env, expert, 0, json.loads(row["extra_info"]["env_options"]))
        events = episode["events"]
        assert all(e["well_formed"] for e in events_of(events, "action")) and not events_of(
            events, "judge_error"
        )
        assert [e["kind"] for e in events_of(events, "action")] == ["plan", "retrieve", "judge", "answer"]
        chosen = events_of(events, "evidence_selected")[0]
        hits.append(chosen["selected"][0] in chosen["gold_images"])
    return float(np.mean(hits))


def test_noiseless_expert_always_selects_the_gold_image(rows: list[dict]) -> None:
    assert recall_at_1(rows, 0.0) == 1.0


def test_fully_generous_expert_is_the_no_module_ablation(rows: list[dict]) -> None:
    """a=1 everywhere ties the pool, so Stage-1 picks, as the no-module ablation does: about 1 in 3 with P=3."""
    assert recall_at_1(rows, 1.0) < 0.6


def test_demo_reports_the_no_module_ablation_under_its_name_beside_mrags_top_k(demo_task: Path) -> None:
    """The demo's "top-1 of the env's own pool" figure is the paper's no-module ablation, not MRAG; MRAG's plain
    top-k (all 5 fed, no reranking) shares its top-1, so Recall@1 agrees while the evidence differs."""
    from ragym.rl.demo.r3g import baselines

    result = baselines(str(demo_task / "data" / "test.parquet"), 24)
    assert set(result) == {"no_modules", "mrag_topk", "r3g_fixed"}
    assert (
        result["no_modules"]["recall@1"] == result["mrag_topk"]["recall@1"] < result["r3g_fixed"]["recall@1"]
    )
    assert result["mrag_topk"]["recall@5"] >= result["no_modules"]["recall@5"]


def test_judge_lines_put_the_rationale_before_the_decision(rows: list[dict]) -> None:
    pool = "Candidate pool (3 images, most similar first):\n[1] <image> lid hidden\n[2] <image> lid visible: red\n[3] <image> lid hidden"
    expert = R3GExpert(None, np.random.default_rng(0), 0.0)
    assert expert.act(pool).splitlines()[1:4] == [
        "[1] hidden a=0 r=1 t=1",
        "[2] visible a=1 r=1 t=1",
        "[3] hidden a=0 r=1 t=1",
    ]


def test_reject_noise_calls_the_gold_unanswerable_and_a_coin_ignores_the_word() -> None:
    """``reject_noise`` is P(a=0) on the gold image; noise = reject_noise = 0.5 makes a independent of the word."""
    pool = "Candidate pool (3 images, most similar first):\n[1] <image> lid hidden\n[2] <image> lid visible: red\n[3] <image> lid hidden"
    strict = R3GExpert(None, np.random.default_rng(0), 0.0, reject_noise=1.0)
    assert [line.split()[2] for line in strict.act(pool).splitlines()[1:4]] == ["a=0"] * 3
    coin = R3GExpert(None, np.random.default_rng(0), 0.5, reject_noise=0.5)
    lines = [line for _ in range(400) for line in coin.act(pool).splitlines()[1:4]]
    share = {
        w: np.mean([" a=1" in line for line in lines if f"] {w} " in line]) for w in ("visible", "hidden")
    }
    assert abs(share["visible"] - 0.5) < 0.08 and abs(share["hidden"] - 0.5) < 0.06


def test_expert_branches_enumerate_the_noise_with_its_probabilities(
    rows: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One episode per noise branch, weighted by its probability: the exact expectation of the noisy expert."""
    from ragym.rl.demo import r3g as demo
    from ragym.rl.tiny.warm_start import WarmStartConfig

    def judge_turn(row, expert, server, agent_loop):  # the expert's judge turn instead of a tokenized replay
        episode = run_episode(expert.env, expert, 0, json.loads(row["extra_info"]["env_options"]))
        return next(t for t in episode["turns"] if t.startswith("<judge>"))

    monkeypatch.setattr(demo, "_replay", judge_turn)
    cfg = WarmStartConfig(4, 0.65, 0.2, 0.0, 5.0, 1, 2, 1e-3, seed=0)
    branches = demo.expert_branches(rows[:4], None, None, cfg)
    assert len(branches) == 16 and {weight for _, weight, _ in branches} == {5.0}
    for i in range(4):
        shares = {}
        for turn, _, share in branches[4 * i : 4 * i + 4]:
            lines = turn.splitlines()[1:-1]
            look_alikes = {line.split()[2] for line in lines if "hidden" in line}
            gold = next(line.split()[2] for line in lines if "visible" in line)
            assert len(look_alikes) == 1  # all look-alikes get the same decision in a branch
            shares[(look_alikes.pop(), gold)] = share
        assert shares == pytest.approx(
            {
                ("a=1", "a=0"): 0.65 * 0.2,
                ("a=1", "a=1"): 0.65 * 0.8,
                ("a=0", "a=0"): 0.35 * 0.2,
                ("a=0", "a=1"): 0.35 * 0.8,
            }
        )
    no_reject = WarmStartConfig(4, 0.65, 0.0, 0.0, 5.0, 1, 2, 1e-3, seed=0)
    assert len(demo.expert_branches(rows[:4], None, None, no_reject)) == 8


def test_demo_tokenizer_puts_the_rationale_word_right_before_the_decision_token() -> None:
    """The decision token ``" a="`` (space included) directly follows the copied word, one token back."""
    import itertools

    from ragym.envs.r3g.expert import DECISION_TOKEN
    from ragym.rl.tiny.corpus import builtin_corpus
    from ragym.rl.tiny.policy import GRAMMAR_TOKENS, train_tokenizer

    line = "[2] visible a=1 r=1 t=1"
    tokenizer = train_tokenizer(
        itertools.chain(builtin_corpus(), [line] * 20), 996, GRAMMAR_TOKENS + (DECISION_TOKEN,)
    )
    pieces = [tokenizer.decode([i]) for i in tokenizer.encode(line, add_special_tokens=False)]
    assert pieces[pieces.index(DECISION_TOKEN) - 1 : pieces.index(DECISION_TOKEN) + 2] == [
        " visible",
        " a=",
        "1",
    ]


def test_tokenizer_corpus_covers_prompts_and_turns(rows: list[dict]) -> None:
    texts = list(_corpus(rows[:2], repeats=1))
    assert any("<judge>" in t for t in texts) and any(t.startswith("Candidate pool") for t in texts)


def test_warm_start_up_weights_the_token_after_each_of_several_ids() -> None:
    """The R3G demo weights the word after ``]`` and the score after ``a=``; other and masked tokens keep 1 / 0."""
    from ragym.rl.core.grpo import Sample
    from ragym.rl.tiny.warm_start import token_weights

    bracket, decision = 7, 8
    sample = Sample(
        [1, bracket], [5, bracket, 9, decision, 3, 4, decision, 6], [1, 1, 1, 1, 1, 1, 1, 0], [], 0.0, "0"
    )
    expected = [5.0, 1.0, 5.0, 1.0, 5.0, 1.0, 1.0, 0.0]
    assert token_weights(sample, [bracket, decision], 5.0).tolist() == expected
    assert token_weights(sample, decision, 5.0).tolist() == [1.0, 1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 0.0]


def test_the_r3g_warm_start_refuses_a_value_swap_it_has_no_values_for(tmp_path: Path) -> None:
    """``swap_values`` is the KB-VQA demo's (its expert copies names and answers); set on the R3G demo's section it is
    one line before any imitation, not a setting silently ignored."""
    from ragym.rl.demo.r3g import warm_start
    from ragym.rl.errors import UsageError

    class Reader:
        def get(self, key: str) -> dict:
            assert key == "ragym.r3g_demo.warm_start"
            return {"swap_values": 1.0}

    with pytest.raises(UsageError, match="swap_values: the R3G expert's episodes have no KB-VQA names"):
        warm_start(None, Reader(), tmp_path, tmp_path / "out", seed=0)
