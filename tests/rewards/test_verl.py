"""The verl adapter: ``compute_score`` as verl's reward loop calls it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragym.rewards import Rubric
from ragym.rewards.verl import compute_score
from tests.rewards.synthetic import synthetic_episode

REPO = Path(__file__).resolve().parents[2]
PAPER_RECIPE = REPO / "recipes" / "rewards" / "mmagent_r2.yaml"
RECIPE = {
    "terms": {
        "outcome": {"weight": 1.0},
        "format": {"weight": 1.0},
        "verification": {"weight": 1.0, "params": {"delta": 0.2}},
    }
}


def verl_args(seed: int) -> dict:
    """What verl hands over: the row's JSON ground truth and the agent loop's extra fields."""
    ep = synthetic_episode(seed, num_images=2)
    extra_info = {
        "index": seed,
        "split": "train",
        "events": ep.events,
        "turns": ep.turns,
        "truncated": ep.truncated,
        "num_turns": len(ep.turns),
        "rollout_reward_scores": {},
    }
    return {
        "data_source": ep.data_source,
        "solution_str": "ignored",
        "ground_truth": json.dumps(ep.ground_truth),
        "extra_info": extra_info,
    }


@pytest.mark.parametrize("seed", range(8))
def test_compute_score_equals_rubric(seed: int) -> None:
    out = compute_score(**verl_args(seed), recipe=RECIPE)
    expected = Rubric.from_recipe(RECIPE).score(synthetic_episode(seed, num_images=2))
    assert out["score"] == pytest.approx(expected.total)
    assert {k: v for k, v in out.items() if k != "score"} == expected.metrics()
    assert set(out) == {"score", "reward/outcome", "reward/format", "reward/verification"}


def test_recipe_path_and_numpy_and_json_extra_fields() -> None:
    args = verl_args(3)
    by_dict = compute_score(
        **args,
        recipe={"terms": {"verification": {"weight": 1.0, "params": {"delta": 0.2, "max_rejections": 2}}}},
    )
    args["extra_info"]["events"] = np.array(args["extra_info"]["events"], dtype=object)
    args["extra_info"]["turns"] = json.dumps(args["extra_info"]["turns"])
    by_path = compute_score(**args, recipe_path=str(PAPER_RECIPE), reward_router_address=None)
    assert by_path["reward/verification"] == by_dict["score"]
    assert set(by_path) >= {"reward/outcome", "reward/format", "reward/retrieval_recall_at_15"}


def test_answer_comes_from_events_not_solution_str() -> None:
    args = verl_args(0)
    args["solution_str"] = "<answer>answer 0</answer>"
    args["extra_info"]["events"] = [e for e in args["extra_info"]["events"] if e["type"] != "answer"]
    assert compute_score(**args, recipe=RECIPE)["reward/outcome"] == 0.0


@pytest.mark.parametrize(
    ("change", "error", "fragment"),
    [
        (lambda a: a.update(ground_truth="Paris"), ValueError, "must be the JSON string"),
        (lambda a: a["extra_info"].pop("events"), ValueError, "has no 'events'"),
        (lambda a: a["extra_info"].update(events={"a": 1}), ValueError, "must be a list"),
    ],
)
def test_bad_inputs_are_clear_errors(change, error, fragment: str) -> None:
    args = verl_args(0)
    change(args)
    with pytest.raises(error, match=fragment):
        compute_score(**args, recipe=RECIPE)


def test_recipe_kwargs_are_checked() -> None:
    with pytest.raises(TypeError, match="exactly one"):
        compute_score(**verl_args(0))
    with pytest.raises(TypeError, match="exactly one"):
        compute_score(**verl_args(0), recipe=RECIPE, recipe_path=str(PAPER_RECIPE))
    with pytest.raises(TypeError, match=r"unknown reward_kwargs \['delta'\]"):
        compute_score(**verl_args(0), recipe=RECIPE, delta=0.3)
    with pytest.raises(ValueError, match="unknown reward 'outcom'"):
        compute_score(**verl_args(0), recipe={"terms": {"outcom": {"weight": 1.0}}})


def test_verl_loads_it_through_its_own_seam() -> None:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://ragym.rewards.verl",
                    "name": "compute_score",
                    "reward_kwargs": {"recipe": RECIPE},
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    args = verl_args(5)
    assert fn(**args) == compute_score(**args, recipe=RECIPE)
