"""ragym's trainer modes over verl's three v1 trainers: one mixin, verl's mode wherever verl reads it, the recipe
checks of each mode, and the off-policy metrics and trace fields. verl's own ``__init__`` runs here (it builds
the replay buffer and reads the mode's settings; workers start later, in ``init``), so no Ray is needed."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf, open_dict
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import _warn_once, check_recipe
from ragym.rl.recipe.compose import resolve_recipe_path
from ragym.rl.recipe.modes import MODES, legacy_notice, mode_problems
from ragym.rl.verl_plugin.sampler import RagymReplayBuffer, RagymReplayBufferAsync
from ragym.rl.verl_plugin.trainer import RagymTrainerMixin, off_policy_metrics, trajectory_staleness

RECIPE = "kbvqa_qwen2_5_vl_7b"
SEPARATE = [
    "trainer.v1.trainer_mode=ragym_separate_async",
    # 128 prompts a step in two parameter syncs of 64: verl's rule for separate_async
    "trainer.v1.separate_async.parameter_sync_step=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
]


def recipe(*overrides: str):
    return check_recipe(resolve_recipe_path(RECIPE), list(overrides), validate=False)


@pytest.mark.parametrize(
    ("mode", "verl_cls"),
    [
        ("ragym", PPOTrainerSync),
        ("ragym_colocate_async", PPOTrainerColocateAsync),
        ("ragym_separate_async", PPOTrainerSeparateAsync),
    ],
)
def test_each_mode_is_verls_trainer_with_the_one_mixin_first(mode, verl_cls):
    cls = get_trainer_cls(mode)  # what verl's main_ppo looks up by the recipe's line
    assert issubclass(cls, verl_cls) and cls.__mro__[1] is RagymTrainerMixin
    # Every ragym method sits in front of verl's for every mode.
    for name in ("_build_replay_buffer", "_compute_metrics", "_validate", "_compute_advantage"):
        assert cls.__mro__.index(_owner(cls, name)) < cls.__mro__.index(verl_cls), name
    assert sorted(MODES) == ["ragym", "ragym_colocate_async", "ragym_separate_async"]


def _owner(cls: type, name: str) -> type:
    return next(klass for klass in cls.__mro__ if name in vars(klass))


def test_verls_init_sees_its_own_mode_and_settings_and_builds_ragyms_async_buffer():
    trainer = get_trainer_cls("ragym_separate_async")(recipe(*SEPARATE))
    # verl branches on the mode name and reads trainer.v1.<mode> by it: parameter_sync_step comes from there.
    assert trainer.trainer_mode == "separate_async" and trainer.parameter_sync_step == 2
    buffer = trainer.replay_buffer
    assert type(buffer) is RagymReplayBufferAsync and isinstance(buffer, ReplayBufferAsync)
    assert buffer.trainer_mode == "separate_async" and buffer.trainer_config.parameter_sync_step == 2
    assert (
        buffer.max_off_policy_threshold == 8 and buffer.max_off_policy_strategy == "drop"
    )  # verl's defaults


def test_the_colocated_mode_gets_the_async_buffer_with_the_recipes_bound():
    config = recipe(
        "trainer.v1.trainer_mode=ragym_colocate_async", "trainer.v1.sampler.max_off_policy_threshold=2"
    )
    trainer = get_trainer_cls("ragym_colocate_async")(config)
    assert trainer.trainer_mode == "colocate_async" and trainer.parameter_sync_step == 1
    assert type(trainer.replay_buffer) is RagymReplayBufferAsync
    assert trainer.replay_buffer.max_off_policy_threshold == 2


def test_the_sync_mode_keeps_verls_sync_buffer():
    trainer = get_trainer_cls("ragym")(recipe())
    assert trainer.trainer_mode == "sync" and type(trainer.replay_buffer) is RagymReplayBuffer


def test_verls_own_async_modes_are_refused_with_ragyms_name():
    with pytest.raises(UsageError, match="trainer_mode=ragym_colocate_async"):
        recipe("trainer.v1.trainer_mode=colocate_async")
    with pytest.raises(UsageError, match="trainer_mode=ragym_separate_async"):
        recipe("trainer.v1.trainer_mode=separate_async")


def test_an_unbounded_async_mode_is_refused_by_the_check_and_by_the_trainer():
    unbounded = [
        "trainer.v1.trainer_mode=ragym_colocate_async",
        "trainer.v1.sampler.max_off_policy_threshold=null",
    ]
    with pytest.raises(UsageError, match="needs a staleness bound"):
        recipe(*unbounded)
    # A job started without ragym's check (verl's main_ppo directly) is refused by the trainer itself.
    config = recipe("trainer.v1.trainer_mode=ragym_colocate_async")
    config.trainer.v1.sampler.max_off_policy_threshold = None
    with pytest.raises(UsageError, match="needs a staleness bound"):
        get_trainer_cls("ragym_colocate_async")(config)
    # Sync needs none: every trajectory comes from the latest weights.
    assert mode_problems(recipe("trainer.v1.sampler.max_off_policy_threshold=null")) == []


def test_a_correction_the_rollout_gives_no_log_probs_for_is_refused():
    """verl's trainer weighs the loss only when the batch has the rollout's log-probs, and skips it silently else."""
    no_log_probs = [
        "trainer.v1.trainer_mode=ragym_colocate_async",
        "actor_rollout_ref.rollout.calculate_log_probs=false",
    ]
    with pytest.raises(
        UsageError, match="calculate_log_probs is false: the rollout would record no log-probs"
    ):
        recipe(*no_log_probs)
    # The sync mode too, where the correction is on: the paper recipe's vLLM rollout (auto: on)...
    with pytest.raises(UsageError, match="resolves to token for trainer.v1.trainer_mode=ragym, but"):
        recipe("actor_rollout_ref.rollout.calculate_log_probs=false")
    # ... while with the correction off no log-probs are needed.
    assert mode_problems(recipe(*no_log_probs, "+ragym.off_policy_correction=off")) == []


def test_the_legacy_trainer_refuses_what_only_ragyms_modes_carry_out_and_names_what_it_runs_without(caplog):
    """verl's legacy trainer (``trainer.use_v1=false``) has no ragym mixin: the correction ragym hands verl, turn-level
    credit's inputs and co-training would be skipped without a word there, so they are refused; the guards, metrics
    and traces it runs without are named in one warning, once however often the run checks its recipe."""
    legacy = "trainer.use_v1=false"
    # The paper recipe's vLLM rollout resolves the correction to token; ragym sets it only in its modes.
    with pytest.raises(
        UsageError, match="use_v1=false \\(verl's legacy trainer\\): ragym.off_policy_correction"
    ):
        recipe(legacy)
    off = [legacy, "+ragym.off_policy_correction=off"]
    with pytest.raises(
        UsageError, match="adv_estimator=turn_credit takes the turns from ragym's trainer modes"
    ):
        recipe(*off, "algorithm.adv_estimator=turn_credit")
    config = recipe(*off)
    with open_dict(config):
        config.ragym.cotrain = {"enable": True}
    assert [p.split(": ", 1)[1] for p in mode_problems(config)] == [
        "ragym.cotrain.enable: retriever co-training runs in ragym's trainer modes only; or drop trainer.use_v1=false"
    ]
    # What it runs without: a warning, not a refusal, logged once however often the run checks its recipe.
    _warn_once.cache_clear()
    caplog.clear()
    with caplog.at_level("WARNING", logger="ragym.rl.recipe.check"):
        recipe(*off)
        recipe(*off)
    assert len(caplog.messages) == 1
    assert "trainer.use_v1=false: verl's legacy trainer runs without ragym's guards" in caplog.messages[0]
    # ragym's own modes: no warning, and the same recipe runs the correction.
    assert legacy_notice(recipe()) is None
    assert mode_problems(recipe()) == []


def test_separate_async_problems_are_listed_together():
    config = OmegaConf.create(
        {
            "trainer": {
                "v1": {
                    "trainer_mode": "ragym_separate_async",
                    "sampler": {"max_off_policy_threshold": 4},
                    "separate_async": {"parameter_sync_step": 4},
                }
            },
            "data": {"train_batch_size": 128},
            "actor_rollout_ref": {
                "actor": {"ppo_mini_batch_size": 128},
                "rollout": {"nnodes": 0, "n_gpus_per_node": 8},
            },
        }
    )
    problems = mode_problems(config)
    assert len(problems) == 2
    assert "set parameter_sync_step to 1" in problems[0] and "actor_rollout_ref.rollout.nnodes" in problems[1]


def test_staleness_counts_updates_behind_the_oldest_weights_used():
    # Step 5 trains with weights version 4 (after step 4). A trajectory from version 4 is fresh; one begun on
    # version 2 and finished on 4 (partial rollout) is 2 updates old at its worst.
    assert trajectory_staleness(5, (4, 4)) == 0 and trajectory_staleness(5, (2, 4)) == 2
    dropped = {"training/off_policy/evicted_samples": 3}
    metrics = off_policy_metrics(5, [(4, 4), (2, 4), (3, 3), (4, 4)], dropped)
    assert metrics == {"off_policy/stale_share": 0.5, "off_policy/dropped_stale_groups": 3.0}
    # Logged at every step, also when verl's buffer dropped nothing (it then logs no count of its own).
    assert off_policy_metrics(1, [(0, 0)], {}) == {
        "off_policy/stale_share": 0.0,
        "off_policy/dropped_stale_groups": 0.0,
    }
