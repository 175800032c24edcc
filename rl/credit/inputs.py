"""The turn structure turn-level credit needs, from what both engines keep of each trajectory.

Per trajectory: the agent loop's ``extra_fields`` (``turn_ids``, ``events``, ``turns``, ``env_id``) and the
row's data source and ground truth. Step rewards come from the training recipe's own reward recipe (the rubric
``ragym.rewards.verl.compute_score`` scores with), anchors from the env's declaration (``ragym.envs.anchors``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ragym.envs.anchors import turn_anchors
from ragym.rewards.rubric import Rubric, plain_config
from ragym.rewards.steps import rubric_step_rewards
from ragym.rewards.verl import episode_from_verl, rubric_for
from ragym.rl.credit.turn_credit import TurnCreditInputs

STEP_WEIGHT_KEY = "ragym.turn_credit.step_weight"
"""Recipe key: w, the weight of the step advantage (default 1.0)."""
REWARD_KWARGS_KEY = "reward.custom_reward_function.reward_kwargs"


def step_weight(config: DictConfig) -> float:
    """The recipe's step-advantage weight (``ragym.turn_credit.step_weight``, default 1.0)."""
    value = OmegaConf.select(config, STEP_WEIGHT_KEY, default=1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{STEP_WEIGHT_KEY} must be a number, got {value!r}")
    return float(value)


def recipe_rubric(reward_kwargs: Mapping[str, Any] | None) -> Rubric:
    """The rubric of a recipe's ``reward_kwargs`` (``recipe`` or ``recipe_path``, plus ``overrides``)."""
    kwargs = dict(plain_config(reward_kwargs) or {})
    return rubric_for(kwargs.get("recipe"), kwargs.get("recipe_path"), kwargs.get("overrides"))


def trajectory_turns(
    extra_fields: Mapping[str, Any], data_source: str, ground_truth: Any, rubric: Rubric
) -> tuple[list[int], dict[int, float], dict[int, str]]:
    """(turn ids, step rewards, anchors) of one trajectory."""
    if "turn_ids" not in extra_fields:
        raise ValueError(
            "turn credit: a trajectory has no extra_fields['turn_ids']; is it the ragym agent loop's output?"
        )
    events = list(extra_fields["events"])
    episode = episode_from_verl(data_source, ground_truth, {**extra_fields, "events": events})
    return (
        [int(t) for t in extra_fields["turn_ids"]],
        rubric_step_rewards(rubric, episode),
        turn_anchors(str(extra_fields["env_id"]), events),
    )


def turn_credit_inputs(
    extra_fields: Sequence[Mapping[str, Any]],
    data_sources: Sequence[str],
    ground_truths: Sequence[Any],
    rubric: Rubric,
    weight: float,
) -> TurnCreditInputs:
    """The batch's ``TurnCreditInputs``, row-aligned with ``extra_fields``."""
    parts = [
        trajectory_turns(fields, source, truth, rubric)
        for fields, source, truth in zip(extra_fields, data_sources, ground_truths, strict=True)
    ]
    return TurnCreditInputs(
        turn_ids=[p[0] for p in parts],
        step_rewards=[p[1] for p in parts],
        anchors=[p[2] for p in parts],
        step_weight=weight,
    )


def local_turn_credit(
    rows: Sequence[Mapping[str, Any]], results: Sequence[Any], rollout_n: int, rubric: Rubric, weight: float
) -> TurnCreditInputs:
    """The local engine's inputs: ``results`` are ``rollout_n`` consecutive episodes of each row, in row order."""
    if len(results) != len(rows) * rollout_n:
        raise ValueError(f"turn credit: {len(results)} episodes for {len(rows)} rows x {rollout_n}")
    owners = [rows[i // rollout_n] for i in range(len(results))]
    for result, row in zip(results, owners, strict=True):
        if result.row_index != int(row["extra_info"]["index"]):
            raise ValueError(
                f"turn credit: episode of row {result.row_index} aligned with row "
                f"{row['extra_info']['index']}"
            )
    return turn_credit_inputs(
        [r.output.extra_fields for r in results],
        [str(row["data_source"]) for row in owners],
        [row["reward_model"]["ground_truth"] for row in owners],
        rubric,
        weight,
    )
