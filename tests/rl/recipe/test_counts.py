"""A recipe count (GPUs, prompts, episodes, tokens, steps) is a whole number of at least 1, or null where allowed."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from ragym.rl.recipe.counts import count_problem, count_problems


@pytest.mark.parametrize(
    ("value", "optional", "accepted"),
    [
        (1, False, True),
        (128, False, True),
        (None, True, True),
        (None, False, False),
        (0, False, False),
        (-4, True, False),
        (1.5, False, False),
        (8.0, False, False),
        (True, False, False),
        ("abc", False, False),
        ("8", False, False),
    ],
)
def test_a_count_is_a_whole_number_of_at_least_one(value: object, optional: bool, accepted: bool) -> None:
    problem = count_problem("data.train_batch_size", value, optional=optional)
    assert (problem is None) == accepted, problem
    if problem is not None:
        assert (
            problem.startswith("data.train_batch_size ")
            and "; set data.train_batch_size=1 or more" in problem
        )


def test_every_bad_count_is_one_line_and_a_missing_key_is_left_to_its_reader() -> None:
    config = OmegaConf.create({"trainer": {"nnodes": 0, "total_training_steps": None}, "data": {"x": "abc"}})
    keys, optional = ["trainer.nnodes", "data.x", "data.absent"], ["trainer.total_training_steps"]
    assert count_problems(config, keys, optional) == [
        "trainer.nnodes 0 is not a whole number of at least 1; set trainer.nnodes=1 or more",
        "data.x 'abc' is not a whole number of at least 1; set data.x=1 or more",
    ]


def test_the_local_engines_steps_may_be_zero_not_negative() -> None:
    """0 steps is the demo's and the grids' 0-step baseline (the warm start, the evaluation before training)."""
    from ragym.rl.recipe.counts import LOCAL_ENGINE_STEPS

    def steps(value: object) -> list[str]:
        return count_problems(
            OmegaConf.create({"trainer": {"total_training_steps": value}}), [], [], LOCAL_ENGINE_STEPS
        )

    assert steps(0) == steps(None) == steps(30) == []
    assert steps(-1) == [
        "trainer.total_training_steps -1 is not a whole number of at least 0; set trainer.total_training_steps=0 or "
        "more, or null"
    ]


@pytest.mark.parametrize(
    ("estimator", "n", "refused"),
    [
        ("grpo", 1, True),
        ("turn_credit", 1, True),
        ("rloo", 1, True),
        ("grpo", 2, False),
        # No group baseline: one episode a row is theirs to take.
        ("reinforce_plus_plus", 1, False),
        ("remax", 1, False),
        # Not a count: count_problems says so, once.
        ("grpo", 0, False),
        ("grpo", "abc", False),
        ("grpo", True, False),
    ],
)
def test_a_group_estimator_needs_two_episodes_a_group(estimator: str, n: object, refused: bool) -> None:
    """verl's GRPO gives a one-episode group mean 0 and std 1: the raw reward was the advantage, and
    ``grpo/zero_adv_group_share`` (groups of two or more) read 0.0 so ``flat_groups`` never fired."""
    from ragym.rl.recipe.counts import group_size_problems

    config = OmegaConf.create(
        {"algorithm": {"adv_estimator": estimator}, "actor_rollout_ref": {"rollout": {"n": n}}}
    )
    problems = group_size_problems(config)
    assert bool(problems) == refused, problems
    if refused:
        (line,) = problems
        assert line.startswith("actor_rollout_ref.rollout.n 1 ") and f"adv_estimator={estimator}" in line
        assert line.endswith("; set actor_rollout_ref.rollout.n=2 or more")


@pytest.mark.parametrize(
    ("value", "accepted"),
    [(True, True), (False, True), ("no", False), ("false", False), (0, False), (1, False), (None, False)],
)
def test_a_switch_is_true_or_false(value: object, accepted: bool) -> None:
    """``algorithm.filter_groups.enable=no`` on the command line is the string "no": a true value to both engines."""
    from ragym.rl.recipe.counts import switch_problem

    problem = switch_problem("algorithm.filter_groups.enable", value)
    assert (problem is None) == accepted, problem
    if problem is not None:
        assert problem.startswith("algorithm.filter_groups.enable ") and problem.endswith(
            "is not true or false; set algorithm.filter_groups.enable=true or algorithm.filter_groups.enable=false"
        )


def test_every_bad_switch_is_one_line_and_a_missing_key_is_left_to_its_reader() -> None:
    from ragym.rl.recipe.counts import switch_problems

    config = OmegaConf.create({"data": {"shuffle": "no"}, "trainer": {"val_before_train": False}})
    assert switch_problems(config) == [
        "data.shuffle 'no' is not true or false; set data.shuffle=true or data.shuffle=false"
    ]
