"""One override syntax: ``key=value`` with YAML values, for the commands that do not hand them to Hydra."""

from __future__ import annotations

import json

import pytest

from ragym.rl.errors import UsageError
from ragym.rl.recipe.overrides import parse_overrides


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["max_turns=6"], {"max_turns": 6}),
        (["visual_check=false", "lr=1e-5"], {"visual_check": False, "lr": 1e-5}),
        (["train.max_steps=3"], {"train.max_steps": 3}),  # dotted keys stay whole
        (["tags=[a, b]", "sep=' | '"], {"tags": ["a", "b"], "sep": " | "}),
        (["name=x=y"], {"name": "x=y"}),  # only the first '=' splits
        (["k=1", "k=2"], {"k": 2}),  # the last one wins, as in Hydra
        (["empty="], {"empty": None}),
        ([], {}),
    ],
)
def test_overrides_parse(items: list[str], expected: dict) -> None:
    assert parse_overrides(items) == expected


@pytest.mark.parametrize(
    ("item", "fragment"),
    [("max_turns", "expected key=value"), ("=3", "expected key=value"), ("k=[1, 2", "not YAML")],
)
def test_a_bad_override_is_a_usage_error_naming_it(item: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment) as err:
        parse_overrides([item])
    assert repr(item) in str(err.value)


def test_rollout_takes_env_overrides_as_key_value(capsys: pytest.CaptureFixture) -> None:
    from ragym.rl.eval.scripted import main

    assert main(["--preset", "tiny", "--episodes", "3", "max_turns=2"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 3 and summary["turns"] <= 2  # the policy takes 4-5 turns unbounded
    with pytest.raises(UsageError, match="max_turns"):
        main(["--preset", "tiny", "--episodes", "1", "max_turns"])


def test_train_retriever_refuses_a_key_without_section() -> None:
    from ragym.rl.retriever.cli import apply_overrides
    from ragym.rl.retriever.config import recipe_from_dict

    assert apply_overrides(recipe_from_dict({}), ["train.max_steps=3"]).train.max_steps == 3
    with pytest.raises(UsageError, match="section.key=value"):
        apply_overrides(recipe_from_dict({}), ["max_steps=3"])
