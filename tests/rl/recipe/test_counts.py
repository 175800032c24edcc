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
