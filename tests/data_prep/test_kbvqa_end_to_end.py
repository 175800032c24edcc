"""End to end on the official-format fixtures: prep all three, ``ragym prep mix``, two local-engine GRPO steps
of the tiny policy on the mixed rows, and ``ragym eval`` on the mixed evaluation rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ragym.rl.cli import main as ragym


@pytest.mark.slow
def test_prep_mix_train_and_eval(prepared, tmp_path: Path) -> None:
    from ragym.rl.core.metrics import read_metrics
    from ragym.rl.eval.evaluate import main as evaluate
    from ragym.rl.tiny.policy import build_tiny_policy
    from ragym.rl.train import build_trainer

    root = next(iter(prepared.values()))[0].parent
    repo = Path(__file__).resolve().parents[2]
    mix = tmp_path / "mix"
    assert (
        ragym(["prep", "mix", "--out", str(mix), "--root", str(root), "infoseek=5", "evqa=2", "mmhops=65000"])
        == 0
    )
    summary = json.loads((mix / "mix.json").read_text())
    assert {k: v["train_rows"] for k, v in summary.items()} == {"infoseek": 5, "evqa": 2, "mmhops": 3}
    assert {k: v["eval_split"] for k, v in summary.items()} == {
        "infoseek": "val",
        "evqa": "test",
        "mmhops": "test",
    }
    train = pd.read_parquet(mix / "train.parquet")
    assert sorted(train["data_source"].value_counts().items()) == [
        ("evqa", 2),
        ("infoseek", 5),
        ("mmhops", 3),
    ]
    # Evaluation rows are never filtered: InfoSeek val 5 (2 with no known gold), E-VQA test 3 (1), MMhops test 3 (1).
    assert len(pd.read_parquet(mix / "val.parquet")) == 5 + 3 + 3

    policy = build_tiny_policy("qwen2_5_vl", tmp_path / "policy", seed=0)
    # The fixture KBs run Rej_max=0; the verification reward reads it from each episode.
    reward = yaml.safe_load((repo / "recipes" / "rewards" / "mmagent_r2.yaml").read_text())
    reward["terms"]["verification"]["params"]["max_rejections"] = None
    (tmp_path / "reward.yaml").write_text(yaml.safe_dump(reward))
    overrides = [
        f"actor_rollout_ref.model.path={policy}",
        f"data.train_files={mix}/train.parquet",
        f"data.val_files={mix}/val.parquet",
        f"trainer.default_local_dir={tmp_path / 'run'}",
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console]",
        "data.train_batch_size=2",
        "data.max_response_length=48",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"reward.custom_reward_function.reward_kwargs.recipe_path={tmp_path / 'reward.yaml'}",
    ]
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    trainer.fit()
    trainer.close()
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert {"reward/total", "reward/outcome", "reward/verification", "episode/ident_acc"} <= set(record)
        assert len(record["rows"]) == 2 and all(0 <= i < len(train) for i in record["rows"])

    out = tmp_path / "eval"
    assert (
        evaluate(
            [
                "--model",
                str(policy),
                "--data",
                str(mix / "val.parquet"),
                "--out",
                str(out),
                "--recipe",
                "kbvqa_tiny_cpu",
                "--backend",
                "hf",
                "data.max_response_length=48",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
                overrides[-1],
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["all"]["num_episodes"] == 11
    assert {s: m["num_episodes"] for s, m in metrics["by_source"].items()} == {
        "infoseek": 5,
        "evqa": 3,
        "mmhops": 3,
    }
    # The paper's columns, from what prep wrote into the rows; the fixture KBs have BM25 only.
    columns = {
        s: {k: v["num_episodes"] for k, v in m["paper"]["subsets"].items()}
        for s, m in metrics["by_source"].items()
    }
    assert columns == {
        "infoseek": {"unseen_question": 2, "unseen_entity": 3},
        "evqa": {"single_hop": 3, "two_hop": 0},
        "mmhops": {"bridge": 2, "compare": 1},
    }
    assert {s: m["text_retriever"] for s, m in metrics["by_source"].items()} == {
        "infoseek": {"bm25": 5},
        "evqa": {"bm25": 3},
        "mmhops": {"bm25": 3},
    }
    assert "| | Bridging | Comparison | All |" in (out / "metrics.md").read_text()
    infoseek = metrics["by_source"]["infoseek"]
    assert infoseek["accuracy_aggregation"] == "harmonic mean of splits"  # rows carry InfoSeek's data_split
    assert set(infoseek["accuracy_by_split"]) == {"val_unseen_question", "val_unseen_entity"}
