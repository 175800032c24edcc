"""Rubric: recipe loading and its errors, totals and breakdowns, custom rewards by dotted path, guards."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ragym.rewards import Episode, RewardError, Rubric
from tests.rewards.synthetic import synthetic_episode

REPO = Path(__file__).resolve().parents[2]
PAPER_RECIPE = REPO / "recipes" / "rewards" / "mmagent_r2.yaml"
CUSTOM = "tests.rewards.custom_rewards"


def recipe(**terms) -> dict:
    return {"terms": terms}


def test_paper_recipe_is_outcome_format_verification_with_delta_0_2() -> None:
    rubric = Rubric.from_recipe(PAPER_RECIPE)
    weights = {t.name: t.weight for t in rubric.terms}
    assert weights["outcome"] == weights["format"] == weights["verification"] == 1.0
    assert sum(w for w in weights.values()) == 3.0
    assert next(t for t in rubric.terms if t.name == "verification").params["delta"] == 0.2


def test_total_is_weighted_sum_of_terms() -> None:
    ep = synthetic_episode(0, num_images=2)
    rubric = Rubric.from_recipe(
        recipe(
            outcome={"weight": 2.0},
            verification={"weight": 0.5, "params": {"delta": 0.3}},
            format={"weight": -1.0},
        )
    )
    result = rubric.score(ep)
    b = result.breakdown
    assert result.total == pytest.approx(2.0 * b["outcome"] + 0.5 * b["verification"] - b["format"])
    assert set(result.metrics()) == {"reward/outcome", "reward/verification", "reward/format"}


def test_same_reward_twice_under_two_names() -> None:
    rubric = Rubric.from_recipe(
        recipe(
            r5={"reward": "retrieval_recall", "weight": 0, "params": {"k": 5}},
            r100={"reward": "retrieval_recall", "weight": 0, "params": {"k": 100}},
        )
    )
    results = [rubric.score(synthetic_episode(s)) for s in range(30)]
    assert all(r.breakdown["r5"] <= r.breakdown["r100"] for r in results)
    assert any(r.breakdown["r5"] < r.breakdown["r100"] for r in results)
    assert all(r.total == 0.0 for r in results)


def test_none_terms_are_skipped_and_listed() -> None:
    rubric = Rubric.from_recipe(
        recipe(outcome={"weight": 1.0}, na={"weight": 5.0, "reward": f"{CUSTOM}:not_applicable"})
    )
    result = rubric.score(
        Episode("generic", [], [{"type": "answer", "turn": 0, "text": "x", "forced": False}], "x")
    )
    assert result.total == 1.0 and result.skipped == ("na",)
    assert result.metrics()["reward/na"] == 0.0


def test_data_sources_limit_a_term() -> None:
    rubric = Rubric.from_recipe(recipe(outcome={"weight": 1.0, "data_sources": ["infoseek"]}))
    assert rubric.score(synthetic_episode(0)).breakdown == {"outcome": None}


def test_custom_reward_by_dotted_path_with_params() -> None:
    rubric = Rubric.from_recipe(
        recipe(brevity={"weight": 1.0, "reward": f"{CUSTOM}:brevity", "params": {"max_turns": 3}})
    )
    ep = Episode("generic", ["a", "b"], [], "x")
    assert rubric.score(ep).total == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("bad_recipe", "fragment"),
    [
        (recipe(outcom={"weight": 1.0}), "unknown reward 'outcom'"),
        (
            recipe(verification={"weight": 1.0, "params": {"detla": 0.2}}),
            r"unknown parameter\(s\) \['detla'\]",
        ),
        (recipe(verification={"weight": 1.0, "params": {"delta": "high"}}), "delta must be a finite number"),
        (
            recipe(verification={"weight": 1.0, "params": {"delta": float("nan")}}),
            "delta must be a finite number",
        ),
        (recipe(format={"weight": 1.0, "params": {"mode": "strict"}}), "mode must be one of"),
        (recipe(format={"weight": 1.0, "params": {"on_truncated": "ignore"}}), "on_truncated must be one of"),
        (recipe(outcome={}), "weight must be a finite number"),
        (recipe(outcome={"weight": float("inf")}), "weight must be a finite number"),
        (recipe(outcome={"weight": True}), "weight must be a finite number"),
        (recipe(outcome={"weight": 1, "wieght": 1}), r"term 'outcome': unknown key\(s\) \['wieght'\]"),
        (recipe(outcome={"weight": 1, "data_sources": "infoseek"}), "data_sources must be a list"),
        (recipe(outcome=1.0), "must be a mapping"),
        (
            recipe(b={"weight": 1, "reward": f"{CUSTOM}:brevity", "params": {"max_turn": 3}}),
            r"unknown parameter\(s\) \['max_turn'\]",
        ),
        (recipe(b={"weight": 1, "reward": f"{CUSTOM}:nope"}), "cannot import custom reward"),
        (recipe(b={"weight": 1, "reward": "no_such_module_xyz:f"}), "cannot import custom reward"),
        (recipe(b={"weight": 1, "reward": f"{CUSTOM}:NOT_CALLABLE"}), "not callable"),
        ({"terms": {}}, "non-empty mapping"),
        ({"terms": {"outcome": {"weight": 1}}, "term": {}}, r"unknown key\(s\) \['term'\]"),
        (["outcome"], "must be a mapping"),
    ],
)
def test_recipe_errors_name_the_culprit(bad_recipe, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Rubric.from_recipe(bad_recipe)


@pytest.mark.parametrize(("fn", "fragment"), [("nan_reward", "returned nan"), ("broken", "'b' .* failed")])
def test_nan_and_exceptions_never_leave_silently(fn: str, fragment: str) -> None:
    rubric = Rubric.from_recipe(recipe(b={"weight": 1.0, "reward": f"{CUSTOM}:{fn}"}))
    with pytest.raises(RewardError, match=fragment):
        rubric.score(synthetic_episode(0))


def test_recipe_from_yaml_file_and_from_training_recipe(tmp_path: Path) -> None:
    reward_recipe = {"name": "mine", "terms": {"verification": {"weight": 1.0, "params": {"delta": 0.3}}}}
    standalone = tmp_path / "r.yaml"
    standalone.write_text(yaml.safe_dump(reward_recipe))
    training = tmp_path / "train.yaml"
    training.write_text(
        yaml.safe_dump(
            {
                "defaults": ["ppo_trainer", "_self_"],
                "reward": {
                    "custom_reward_function": {
                        "path": "pkg://ragym.rewards.verl",
                        "name": "compute_score",
                        "reward_kwargs": {"recipe": reward_recipe},
                    }
                },
            }
        )
    )
    by_path = tmp_path / "train_by_path.yaml"
    by_path.write_text(
        yaml.safe_dump({"reward": {"custom_reward_function": {"reward_kwargs": {"recipe_path": "r.yaml"}}}})
    )
    for source in (standalone, training, by_path, str(standalone)):
        rubric = Rubric.from_recipe(source)
        assert rubric.name == "mine" and rubric.terms[0].params == {"delta": 0.3}
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        Rubric.from_recipe(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"reward": {"custom_reward_function": {}}}))
    with pytest.raises(ValueError, match="broken.yaml: training recipe has no"):
        Rubric.from_recipe(broken)


def test_a_term_listed_twice_in_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    # yaml.safe_load kept the second entry: the outcome term silently lost its weight of 1.
    path = tmp_path / "r.yaml"
    path.write_text("terms:\n  outcome: {weight: 1.0}\n  format: {weight: 1.0}\n  outcome: {weight: 0.0}\n")
    with pytest.raises(ValueError, match=r"r.yaml: line 4: 'outcome' is given twice in one mapping"):
        Rubric.from_recipe(path)


def test_omegaconf_recipe_as_verl_passes_it() -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"terms": {"verification": {"weight": 1.0, "params": {"delta": 0.1}}}})
    assert Rubric.from_recipe(cfg).terms[0].params == {"delta": 0.1}
