"""Dynamic sampling on hand-made groups: which groups are flat, refill rounds and their bound, top-ups, the
shaped-reward warning; and verl's own sync filter on ragym-shaped trajectories."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ragym.rl.core.dynamic_sampling import FilterConfig, sample_groups, shaped_metric_warning, split_groups
from ragym.rl.errors import UsageError


@dataclass
class Ep:
    """An episode as dynamic sampling sees it."""

    uid: str
    reward: float
    score: dict[str, float] = field(default_factory=dict)


def group(uid: str, *rewards: float, outcome: float | None = None) -> list[Ep]:
    return [Ep(uid, r, {"score": r, "reward/outcome": r if outcome is None else outcome}) for r in rewards]


def test_flat_groups_are_those_whose_metric_does_not_vary():
    episodes = group("a", 1, 0) + group("b", 2, 2) + group("c", 0.5) + group("d", 1, 1, outcome=0)
    kept, flat = split_groups(episodes, "reward")
    assert [g[0].uid for g in kept] == ["a", "c"]  # a one-episode group is kept, as verl's filter does
    assert [g[0].uid for g in flat] == ["b", "d"]
    # Keyed on another compute_score value: d's total is flat and so is its outcome; a's outcome varies.
    kept, flat = split_groups(group("a", 1, 0) + group("e", 1, 2, outcome=0), "reward/outcome")
    assert [g[0].uid for g in kept] == ["a"] and [g[0].uid for g in flat] == ["e"]


def test_a_metric_the_rubric_does_not_log_is_an_error():
    with pytest.raises(UsageError, match="reward/ident"):
        split_groups(group("a", 1, 0), "reward/ident")


class Rollouts:
    """A rollout function over scripted rounds: each round lists, per row, the rewards of its G episodes."""

    def __init__(self, rounds: list[list[tuple[float, ...]]]) -> None:
        self.rounds, self.asked = rounds, []

    def __call__(self, num_rows: int, round_: int) -> tuple[list[str], list[Ep]]:
        self.asked.append(num_rows)
        groups = self.rounds[round_][:num_rows]
        rows = [f"r{round_}.{i}" for i in range(len(groups))]
        return rows, [e for row, rewards in zip(rows, groups, strict=True) for e in group(row, *rewards)]


def test_flat_groups_are_dropped_and_refilled_until_the_batch_varies():
    rollouts = Rollouts([[(1, 0), (1, 1), (0, 0), (1, 0)], [(2, 2), (0, 1)], [(0, 1)]])
    out = sample_groups(rollouts, 4, FilterConfig(enable=True, max_num_gen_batches=5))
    assert rollouts.asked == [4, 2, 1]  # each refill asks for as many rows as groups are missing
    assert out.rows == ["r0.0", "r0.3", "r1.1", "r2.0"]
    assert [g[0].uid for g in out.groups] == out.rows
    assert out.metrics() == {
        "dynamic_sampling/flat_group_share": 3 / 7,
        "dynamic_sampling/gen_batches": 3.0,
        "dynamic_sampling/dropped_groups": 3.0,
        "dynamic_sampling/topped_up_groups": 0.0,
    }


def test_at_the_bound_the_batch_is_topped_up_with_flat_groups():
    rollouts = Rollouts([[(1, 1), (0, 1), (0, 0)], [(1, 1), (3, 3)], [(0, 1)]])
    out = sample_groups(rollouts, 3, FilterConfig(enable=True, max_num_gen_batches=2))
    assert rollouts.asked == [3, 2]  # the third round is never run
    assert out.rows == ["r0.1", "r0.0", "r0.2"]  # the varying group, then flat ones in rollout order
    assert out.num_topped_up == 2
    assert out.metrics()["dynamic_sampling/dropped_groups"] == 2.0  # 4 flat, 2 of them trained on


def test_surplus_varying_groups_are_discarded():
    rollouts = Rollouts([[(0, 0), (0, 0)], [(0, 1), (1, 0)]])
    out = sample_groups(rollouts, 2, FilterConfig(enable=True))
    assert out.rows == ["r1.0", "r1.1"] and out.num_rounds == 2


def test_filtering_off_only_counts_flat_groups():
    rollouts = Rollouts([[(1, 1), (0, 1), (2, 2)]])
    out = sample_groups(rollouts, 3, FilterConfig(enable=False))
    assert out.rows == ["r0.0", "r0.1", "r0.2"] and rollouts.asked == [3]
    assert out.metrics()["dynamic_sampling/flat_group_share"] == 2 / 3
    assert out.num_topped_up == 0
    assert out.metrics()["dynamic_sampling/dropped_groups"] == 0.0  # counted, trained on: none dropped


def test_enabled_without_a_metric_is_an_error():
    with pytest.raises(UsageError, match="metric must be set"):
        FilterConfig(enable=True, metric="")


WEIGHTS = {"outcome": 1.0, "format": 1.0, "verification": 1.0, "retrieval_recall_at_15": 0.0}


@pytest.mark.parametrize(
    ("metric", "outcome", "warned"),
    [
        ("reward/outcome", "reward/outcome", False),
        ("reward", "reward/outcome", True),  # the total includes format and verification
        ("score", None, True),
        ("reward/format", "reward/outcome", True),
        ("reward/verification", None, True),
    ],
)
def test_warning_when_the_filter_keys_on_a_shaped_reward(metric, outcome, warned):
    warning = shaped_metric_warning(metric, outcome, WEIGHTS)
    assert (warning is not None) == warned
    if warned:
        assert metric in warning and (
            "reward/outcome" in warning if outcome else "ragym.outcome_metric" in warning
        )


def test_the_total_is_the_outcome_when_no_other_term_weighs():
    assert shaped_metric_warning("reward", "reward/outcome", {"outcome": 1.0, "recall": 0.0}) is None


def test_verl_sync_filter_reads_ragym_groups(monkeypatch):
    """verl 0.9.1's own DAPO filter (``algorithm.filter_groups``) on trajectories as ragym's agent loop stores
    them: one output per episode under ``{uid}_{session}_0``, ``compute_score``'s keys in reward_extra_info."""
    from verl.trainer.ppo.v1 import replay_buffer as rb

    trajectories = {  # two groups of G=3 multi-turn episodes; outcome flat in "b", the total is not
        "a_0_0": {"score": 1.0, "reward/outcome": 1.0},
        "a_1_0": {"score": 2.0, "reward/outcome": 0.0},
        "a_2_0": {"score": 1.0, "reward/outcome": 1.0},
        "b_0_0": {"score": 1.0, "reward/outcome": 0.0},
        "b_1_0": {"score": 1.2, "reward/outcome": 0.0},
        "b_2_0": {"score": 0.2, "reward/outcome": 0.0},
    }

    def kv_batch_get(keys, partition_id, select_fields):
        assert select_fields == ["extra_fields"]
        return {"extra_fields": [{"reward_extra_info": trajectories[k], "turns": ["t"] * 3} for k in keys]}

    monkeypatch.setattr(rb.tq, "kv_batch_get", kv_batch_get)
    buffer = rb.ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        refill_fn=lambda n: None,
        filter_groups_metric="reward/outcome",
        train_batch_size=2,
        gen_batch_size=1,
    )
    buffer.finished_keys["train"] = {"a", "b"}
    buffer.partitions["train"] = {key: {"status": "success"} for key in trajectories}
    filtered, counts = buffer._dapo_filtered_keys("train")
    assert filtered == {"b"} and dict(counts) == {0.0: 1}


@pytest.fixture(scope="module")
def engine_setup(tmp_path_factory):
    """A tiny policy and the demo KB's rows."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.policy import build_tiny_policy

    root = tmp_path_factory.mktemp("dynamic")
    kb = build_kb(root / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    return kb, build_tiny_policy("qwen2_5_vl", root / "policy", seed=0)


def constant_reward(episode) -> float:
    """A test reward no group can vary on."""
    return 1.0


def test_local_engine_step_with_dynamic_sampling_and_a_stop_guard(tmp_path, engine_setup):
    """A real step: every group flat, so the engine refills up to the bound, tops up, logs the share; an
    entropy floor no tiny policy reaches then stops the run with one line, after the step's metrics."""
    from ragym.rl.core.metrics import read_metrics
    from ragym.rl.guards import GuardStop, read_firings
    from ragym.rl.train import build_trainer
    from tests.rl.engine.test_engine_trainer import _overrides

    overrides = [
        *_overrides(engine_setup, tmp_path, steps=3),
        "~reward.custom_reward_function.reward_kwargs.recipe",
        "+reward.custom_reward_function.reward_kwargs.recipe={terms:{flat:{weight:1.0,"
        "reward:'tests.rl.core.test_dynamic_sampling:constant_reward'}}}",
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.max_num_gen_batches=2",
        "ragym.guards.entropy_floor.action=stop",
        "ragym.guards.entropy_floor.threshold=1000.0",
        "ragym.guards.entropy_floor.steps=1",
    ]
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    try:
        with pytest.raises(GuardStop) as stopped:
            trainer.fit()
    finally:
        trainer.close()
    assert trainer.order.position == 4  # 2 rows, then 2 refill rows for the 2 flat groups
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    assert record["dynamic_sampling/gen_batches"] == 2.0
    assert record["dynamic_sampling/flat_group_share"] == 1.0
    assert record["dynamic_sampling/topped_up_groups"] == 2.0
    assert len(record["rows"]) == 2 and record["guard/entropy_floor"] == 1.0
    message = str(stopped.value)
    assert message.startswith("guard entropy_floor fired at step 1: actor/entropy < 1000.0 for 1 steps (")
    assert "\n" not in message
    assert [f["step"] for f in read_firings(tmp_path)] == [1]
    assert (tmp_path / "global_step_1").is_dir()  # stopped runs keep their last step
