"""Every engine setting and every ``ragym.*`` recipe key has a test that changes it, or a listed reason (issue #51
item 1; STYLE.md habit 11).

Unlike the env configs (``tests/test_settings_walk.py`` changes each field and watches the episodes), a training
setting's effect takes a training run to see, so this walk is a ledger: every field of ``EngineConfig`` (the
``ragym.engine`` section), every key of ``RAGYM_KEYS`` and every field of the ``RAGYM_SECTIONS`` dataclasses must be
in ``COVERED_BY`` (the test that changes it, which must exist and whose file must name the setting) or in
``NOT_COVERED`` with the reason. A new setting in neither fails the suite, naming it.

What the ledger checks is that the named test exists and that its file names the setting, not that the test
asserts a change of it: a named test was chosen by reading it, and the ones that only refuse a bad value or
compose a recipe (``loggers``, ``ragym.demo.kb_preset``, ``ragym.turn_credit.step_weight``) are the weakest.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

from ragym.rl.guards import GUARD_TYPES
from ragym.rl.recipe.check import RAGYM_KEYS, RAGYM_SECTIONS
from ragym.rl.tiny.copy_pretrain import CopyPretrainConfig
from ragym.rl.tiny.policy import TinyPolicyConfig
from ragym.rl.tiny.warm_start import WarmStartTarget

ROOT = Path(__file__).resolve().parents[3]

E = "ragym.engine."
GUARDS = "ragym.guards."
_TRAINER = "tests/rl/engine/test_engine_trainer.py::"
_ASYNC = "tests/rl/engine/test_async_rollouts.py::"
_GUARD_TESTS = "tests/rl/test_guards.py::"
_BY_THRESHOLD = _GUARD_TESTS + "test_each_guard_at_exactly_its_threshold"
_ENGINE = "tests/rl/engine/test_engine_settings.py::test_each_engine_setting_changes_what_the_engine_does"
_DEMO = "tests/rl/demo/test_demo_settings.py::"
_DEMO_WARM = _DEMO + "test_each_warm_start_setting_reaches_what_the_training_step_receives"
_PRETRAIN = _DEMO + "test_copy_pretraining_and_the_tokenizer_corpus_follow_their_settings"
_R3G = "tests/rl/demo/test_r3g_settings.py::"
_R3G_WARM = _R3G + "test_each_r3g_warm_start_setting_reaches_what_the_training_step_receives"
RUN_CHECK_METRICS = (
    "images_dropped.images_metric",
    "images_dropped.tokens_metric",
    "adapter_sync.trained_metric",
    "adapter_sync.rollout_metric",
)
"""Run-check fields naming a metric ragym's engines write themselves (listed in ``NOT_COVERED``)."""
GUARD_FIELD_TESTS = {
    "action": _GUARD_TESTS + "test_a_stop_guard_under_verls_trainer_ends_ragym_train_in_error",
    "metric": _GUARD_TESTS + "test_every_guard_a_recipe_turns_on_watches_a_metric_its_env_logs",
}

COVERED_BY: dict[str, str] = {
    E
    + "train_files": "tests/rl/test_bad_rows_end_to_end.py::test_train_eval_rollout_outside_the_repository_on_bad_rows",
    E
    + "val_files": "tests/rl/test_bad_rows_end_to_end.py::test_train_eval_rollout_outside_the_repository_on_bad_rows",
    E + "shuffle": _TRAINER + "test_killed_run_resumes_with_the_same_data_order",
    E + "seed": _TRAINER + "test_same_seed_same_run_under_full_determinism",
    E + "sampling": "tests/rl/core/test_hf_server.py::test_sampling_filters",
    E
    + "response_length": "tests/rl/agent_loop/test_agent_loop.py::test_stop_strings_and_length_budget_reach_the_server",
    E + "prompt_length": "tests/rl/engine/test_engine_settings.py::"
    "test_lengths_past_the_policys_positions_are_refused_before_the_model_loads",
    E + "lr": "tests/rl/core/test_grpo.py::test_update_step_is_finite_and_moves_parameters",
    E
    + "save_freq": "tests/rl/engine/test_resume.py::test_resumed_run_refuses_a_new_seed_and_drops_unsaved_metrics",
    E
    + "test_freq": "tests/rl/engine/test_validation_guards.py::test_a_held_out_floor_fires_after_n_evaluations_not_n_steps",
    E
    + "total_steps": "tests/rl/engine/test_validation_guards.py::test_a_held_out_floor_fires_after_n_evaluations_not_n_steps",
    E + "loggers": _TRAINER + "test_unknown_logger_is_an_error",
    E + "resume_mode": _ASYNC + "test_checkpoint_with_a_rollout_in_flight_resumes",
    E
    + "resume_from_path": "tests/rl/engine/test_resume.py::test_resume_path_continues_from_the_named_step_and_never_branches_in_place",
    E
    + "reward_kwargs": "tests/rewards/test_recipe_overrides.py::test_the_command_line_override_reaches_the_reward_and_bad_ones_fail_at_load",
    E
    + "filter_groups": "tests/rl/core/test_dynamic_sampling.py::test_local_engine_step_with_dynamic_sampling_and_a_stop_guard",
    E + "guards": _GUARD_TESTS
    + "test_collapse_guards_are_off_unless_the_recipe_turns_them_on_and_run_checks_stop",
    E
    + "outcome_metric": "tests/rl/core/test_dynamic_sampling.py::test_warning_when_the_filter_keys_on_a_shaped_reward",
    E + "lora": "tests/rl/test_lora.py::test_peft_config_carries_every_setting",
    E + "async_rollouts": _ASYNC + "test_step_two_trains_on_episodes_of_the_initial_weights",
    E + "staleness_bound": _ASYNC + "test_bound_one_drops_and_counts_every_batch_rolled_out_ahead",
    E
    + "trace_groups_per_step": "tests/launch/test_new_env_folder.py::test_rollout_budget_local_engine_and_verl_pick_it_up",
    "ragym.verl.trace_groups_per_step": "tests/launch/test_new_env_folder.py::test_rollout_budget_local_engine_and_verl_pick_it_up",
    "ragym.retrieval.url": "tests/rl/recipe/test_retrieval_url.py",
    "ragym.env.max_rejections": "tests/rl/recipe/test_env_settings.py::test_the_setting_reaches_the_envs_that_have_it_and_changes_the_episode",
    "ragym.images.factor": "tests/rl/recipe/test_images.py::test_the_budget_reaches_every_env_that_shows_images",
    "ragym.images.query_max_pixels": "tests/rl/recipe/test_images.py::test_the_budget_reaches_every_env_that_shows_images",
    "ragym.images.candidate_max_pixels": "tests/rl/recipe/test_images.py::test_the_budget_reaches_every_env_that_shows_images",
    "ragym.images.min_pixels": "tests/rl/engine/test_image_tokens.py::test_agent_loop_episodes_spend_at_most_the_recipes_tokens_per_image",
    "ragym.images.cache_bytes": "tests/rl/recipe/test_images.py::test_applying_the_recipe_sizes_the_process_image_cache",
    "ragym.turn_credit.step_weight": "tests/rl/credit/test_engines.py::test_a_verl_recipe_composes_with_turn_credit",
    "ragym.demo.warm_start.noise": "tests/rl/demo/test_demo.py::test_noisy_expert_errs_as_configured",
    "ragym.demo.warm_start.reject_noise": "tests/rl/demo/test_demo.py::test_noisy_expert_errs_as_configured",
    "ragym.demo.warm_start.protocol_share": "tests/rl/demo/test_demo.py::test_protocol_episodes_are_noiseless_and_teach_no_decision",
    "ragym.demo.warm_start.copy_weight": "tests/rl/demo/test_answer_warm_start.py::test_the_answer_task_warm_start_weighs_the_copied_tokens_by_its_copy_weight",
    "ragym.demo.warm_start.context_weight": "tests/rl/demo/test_answer_warm_start.py::test_the_answer_task_warm_start_weighs_the_copied_tokens_by_its_copy_weight",
    "ragym.demo.warm_start.lr_decay": "tests/rl/tiny/test_warm_start.py::test_linear_decay_halves_the_distance_travelled_on_a_steady_target",
    "ragym.demo.warm_start.soft_decisions": "tests/rl/demo/test_demo.py::test_soft_decisions_imitate_both_branches_weighted_by_the_experts_odds",
    "ragym.demo.warm_start.swap_values": "tests/rl/demo/test_value_swap.py::test_swapped_episodes_still_copy_and_change_nothing_but_the_values",
    "ragym.demo.warm_start.init_from": "tests/rl/demo/test_demo.py::test_a_warm_start_continues_the_one_named_by_init_from",
    "ragym.demo.kb_preset": "tests/rl/demo/test_tasks.py::test_every_task_composes_into_the_settings_the_demo_reads",
    "ragym.demo.arch": "tests/rl/tiny/test_tiny_policy.py::test_forward_backward_generate_with_images",
    "ragym.outcome_metric": "tests/rl/core/test_dynamic_sampling.py::test_warning_when_the_filter_keys_on_a_shaped_reward",
    "ragym.off_policy_correction": "tests/rl/test_correction.py::test_the_local_engine_turns_the_correction_on_with_async_rollouts",
    # Engine settings, each changed alone and read where the local engine uses it.
    **{
        E + f: _ENGINE
        for f in (
            "train_batch_size",
            "val_max_samples",
            "rollout_n",
            "val_sampling",
            "update",
            "betas",
            "weight_decay",
            "warmup_steps",
            "total_epochs",
            "val_before_train",
            "batch_wait_s",
            "num_threads",
        )
    },
    "ragym.demo.kb_corpus_repeats": _PRETRAIN,
    **{f"ragym.demo.copy_pretrain.{f.name}": _PRETRAIN for f in dataclasses.fields(CopyPretrainConfig)},
    **{
        f"ragym.demo.warm_start.{f}": _DEMO_WARM
        for f in ("num_episodes", "decision_weight", "epochs", "batch_size", "lr", "seed", "quote")
    },
    **{
        f"ragym.demo.warm_start_target.{f.name}": _DEMO
        + "test_each_warm_start_target_setting_moves_the_check"
        for f in dataclasses.fields(WarmStartTarget)
        if f.name != "restarts"
    },
    "ragym.demo.warm_start_target.restarts": _DEMO
    + "test_a_warm_start_missing_its_target_on_training_questions_is_imitated_again",
    "ragym.r3g_demo.preset": _R3G + "test_the_preset_and_corpus_repeats_reach_the_task_and_the_tokenizer",
    "ragym.r3g_demo.corpus_repeats": _R3G
    + "test_the_preset_and_corpus_repeats_reach_the_task_and_the_tokenizer",
    "ragym.r3g_demo.weighted_after": _R3G_WARM,
    **{
        f"ragym.r3g_demo.warm_start.{f}": _R3G_WARM
        for f in ("num_episodes", "decision_weight", "epochs", "batch_size", "lr", "seed", "context_weight")
    },
    # The R3G demo's warm start is the same WarmStartConfig class, read from its own section.
    **{
        f"ragym.r3g_demo.warm_start.{f}": t
        for f, t in (
            ("noise", "tests/rl/demo/test_demo.py::test_noisy_expert_errs_as_configured"),
            (
                "reject_noise",
                "tests/rl/demo/test_r3g_demo.py::test_reject_noise_calls_the_gold_unanswerable_and_a_coin_ignores_the_word",
            ),
            (
                "soft_decisions",
                "tests/rl/demo/test_demo.py::test_soft_decisions_imitate_both_branches_weighted_by_the_experts_odds",
            ),
            (
                "lr_decay",
                "tests/rl/tiny/test_warm_start.py::test_linear_decay_halves_the_distance_travelled_on_a_steady_target",
            ),
        )
    },
    # Each guard's fields: its action, the metric it watches, and its firing rule's numbers.
    **{
        f"{GUARDS}{name}.{f.name}": GUARD_FIELD_TESTS.get(f.name, _BY_THRESHOLD)
        for name, kind in GUARD_TYPES.items()
        for f in dataclasses.fields(kind)
        if f"{name}.{f.name}" not in RUN_CHECK_METRICS
    },
    # Retriever co-training (issue #49).
    "ragym.cotrain.enable": "tests/rl/cotrain/test_harvest.py::test_counts_per_step",
    "ragym.cotrain.initial_encoder": "tests/rl/cotrain/test_round.py::test_a_round_raises_held_out_recall_of_a_weak_encoder",
    "ragym.cotrain.mode": "tests/rl/cotrain/test_round.py::test_a_round_raises_held_out_recall_of_a_weak_encoder",
    "ragym.cotrain.round_steps": "tests/rl/cotrain/test_round.py::test_a_round_raises_held_out_recall_of_a_weak_encoder",
    "ragym.cotrain.lr": "tests/rl/cotrain/test_round.py::test_a_round_raises_held_out_recall_of_a_weak_encoder",
    "ragym.cotrain.max_recall_drop": "tests/rl/cotrain/test_round.py::test_the_forgetting_guard_skips_a_drop_beyond_the_margin_and_swaps_otherwise",
    "ragym.cotrain.update_documents": "tests/rl/cotrain/test_documents.py::test_a_round_with_update_documents_moves_only_the_touched_entities_and_raises_their_recall",
    "ragym.cotrain.document_lr": "tests/rl/cotrain/test_documents.py::test_the_document_learning_rate_sets_how_far_the_entities_move",
    "ragym.cotrain.guard_k": "tests/rl/cotrain/test_round.py::test_the_guard_reads_recall_at_guard_k",
    "ragym.cotrain.initial_noise_strength": "tests/rl/cotrain/test_round.py::test_a_stronger_initial_distortion_weakens_the_retriever_more",
    "ragym.cotrain.optimiser": "tests/rl/cotrain/test_round_settings.py::test_an_sgd_round_moves_the_query_map_only_along_the_harvested_queries",
    "ragym.cotrain.mined_negatives": "tests/rl/cotrain/test_round_settings.py::test_mined_negatives_raise_r1_on_the_harvested_images_over_in_batch_ones",
    "ragym.cotrain.guard_rows": "tests/rl/cotrain/test_round_settings.py::test_the_guard_reads_its_own_rows_and_recall_is_reported_on_the_held_out_rows",
    "ragym.cotrain.background": "tests/rl/cotrain/test_round.py::test_a_background_round_runs_in_its_own_process_and_the_step_is_not_held",
}
"""Setting -> ``tests/...py::test_name`` (or a whole test file) that changes it and checks what it changes."""

NAMED_AS = {E + "loggers": "trainer.logger", E + "staleness_bound": "max_off_policy_threshold"}
"""Engine fields read from a verl key of another name: the name their test's file uses."""

_CHECKPOINT = "names where a run writes or what it is called; no training behaviour depends on it"
NOT_COVERED: dict[str, str] = {
    E + "model_path": "the policy to train; every engine test names the tiny one, none another",
    E + "output_dir": _CHECKPOINT,
    E + "project_name": _CHECKPOINT,
    E + "experiment_name": _CHECKPOINT,
    **{
        f"ragym.{demo}.policy.{f.name}": "the tiny policy's architecture: tests/rl/tiny/ build it at the demo's "
        "sizes only, and the budget tests count the real model's"
        for demo in ("demo", "r3g_demo")
        for f in dataclasses.fields(TinyPolicyConfig)
    },
    **{
        GUARDS + f: "the name of a metric the engines write for this run check (rl/guards.py's default); "
        "tests/rl/test_run_checks.py fires the check on it, and no recipe renames it"
        for f in RUN_CHECK_METRICS
    },
    # The R3G warm start's own expert and weights leave these unused (test_r3g_settings shows both inert).
    "ragym.r3g_demo.warm_start.swap_values": "r3g.warm_start refuses it in one line: its expert's episodes hold no "
    "KB-VQA names or answers (tests/rl/demo/test_r3g_demo.py)",
    "ragym.r3g_demo.warm_start.quote": "the R3G expert (r3g.R3GExpert) copies no name or value to quote; only the "
    "KB-VQA expert reads quote",
    "ragym.r3g_demo.warm_start.copy_weight": "r3g.warm_start gives imitate no copy spans, so token_weights never "
    "applies it",
    "ragym.r3g_demo.warm_start.protocol_share": "r3g.warm_start sets it to 0 itself (its expert has no protocol "
    "episodes); a recipe value fails there (WarmStartConfig gets protocol_share twice)",
    "ragym.r3g_demo.warm_start.init_from": "r3g.warm_start always starts from its tiny policy and sets it to None "
    "itself; a recipe value fails there (WarmStartConfig gets init_from twice)",
    **{
        f"ragym.cotrain.{name}": "retriever co-training (issue #49): a known gap, no test changes it yet"
        for name in (
            "every_n_steps",
            "lora_rank",
            "batch_size",
            "scale",
            "original_data",
            "original_share",
            "seed",
            "initial_noise_rank",
            "initial_noise_seed",
        )
    },
}
"""Setting -> why no test is named for it: what it names, or why it has no effect the demo or engine could show."""


def ragym_settings() -> list[str]:
    """Every setting the ledger must account for: ``EngineConfig``'s fields, ``RAGYM_KEYS`` and every field of
    the ``RAGYM_SECTIONS`` dataclasses, as dotted recipe paths."""
    settings: list[str] = list(RAGYM_KEYS)
    for section, (module, name) in RAGYM_SECTIONS.items():
        cls = getattr(importlib.import_module(module), name)
        settings += [f"{section}.{field.name}" for field in dataclasses.fields(cls)]
    return settings


def _test_names(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}


def test_every_ragym_setting_has_a_test_or_a_reason() -> None:
    unaccounted = [s for s in ragym_settings() if s not in COVERED_BY and s not in NOT_COVERED]
    assert not unaccounted, (
        f"settings with no test that changes them and no reason in NOT_COVERED (add one to COVERED_BY in "
        f"{Path(__file__).name}, or NOT_COVERED with the reason): {unaccounted}"
    )
    both = sorted(set(COVERED_BY) & set(NOT_COVERED))
    assert not both, f"in COVERED_BY and NOT_COVERED at once: {both}"
    stale = sorted((set(COVERED_BY) | set(NOT_COVERED)) - set(ragym_settings()))
    assert not stale, f"the ledger names settings that no longer exist: {stale}"


def test_every_named_test_exists_and_names_its_setting() -> None:
    broken = []
    for setting, target in COVERED_BY.items():
        file, _, name = target.partition("::")
        path = ROOT / file
        if not path.is_file() or (name and name not in _test_names(path)):
            broken.append(f"{setting}: {target} (no such test)")
        elif not re.search(
            rf"\b{re.escape(NAMED_AS.get(setting, setting.rsplit('.', 1)[1]))}\b", path.read_text()
        ):
            broken.append(
                f"{setting}: {file} never names {NAMED_AS.get(setting, setting.rsplit('.', 1)[1])!r}"
            )
    assert not broken, f"COVERED_BY names tests that do not exist or do not touch the setting: {broken}"
