"""Turn-level credit under verl's v1 trainer: a mixin that hands the estimator the batch's turn structure.

verl 0.9.1's ``_compute_advantage`` reads only ``uid``, masks, scores and log-probs back from TransferQueue and
passes a registered estimator the rewards, mask, group ids and algorithm config. This mixin, placed before the
trainer class (``class RagymTrainer(TurnCreditMixin, PPOTrainerSync)``), reads each trajectory's
``extra_fields`` (turn ids, events, env id), data source and ground truth for the same keys, builds the step
rewards and anchors, and runs verl's own ``_compute_advantage`` with them in context (``turn_credit_batch``).
Other estimators pass straight through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import transfer_queue as tq

from ragym.rl.agent_loop.verl_metrics import tq_column
from ragym.rl.credit.inputs import recipe_rubric, step_weight, turn_credit_inputs
from ragym.rl.credit.turn_credit import TURN_CREDIT, TurnCreditInputs, turn_credit_batch

FIELDS = ["extra_fields", "data_source", "reward_model"]
"""What the mixin reads back from TransferQueue (the agent loop's output and the row, already stored)."""

if TYPE_CHECKING:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

# A mixin placed before verl's trainer in the bases: checked as a PPOTrainer subclass, so ``super()`` and
# ``self.config`` have verl's types; at run time its base is object.
_Base = PPOTrainer if TYPE_CHECKING else object


class TurnCreditMixin(_Base):
    """``_compute_advantage`` with the batch's turn structure in context when the estimator is turn credit."""

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        if self.config.algorithm.adv_estimator != TURN_CREDIT:
            return super()._compute_advantage(batch, metrics)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=FIELDS)
        with turn_credit_batch(self._turn_credit_inputs(batch.tags, data)):
            return super()._compute_advantage(batch, metrics)

    def _turn_credit_inputs(self, tags: list[dict], data: Any) -> TurnCreditInputs:
        """The inputs for the batch's rows; verl's padding rows (copies with no response) get no turns."""
        if getattr(self, "_turn_credit_rubric", None) is None:
            self._turn_credit_rubric = recipe_rubric(self.config.reward.custom_reward_function.reward_kwargs)
        columns = {key: tq_column(data, key) for key in FIELDS}
        real = [i for i, tag in enumerate(tags) if not tag.get("is_padding", False)]
        built = turn_credit_inputs(
            [dict(columns["extra_fields"][i]) for i in real],
            [str(columns["data_source"][i]) for i in real],
            [dict(columns["reward_model"][i])["ground_truth"] for i in real],
            self._turn_credit_rubric,
            step_weight(self.config),
        )
        turn_ids: list[list[int]] = [[] for _ in tags]
        steps: list[dict[int, float]] = [{} for _ in tags]
        anchors: list[dict[int, str]] = [{} for _ in tags]
        for k, i in enumerate(real):
            turn_ids[i], steps[i], anchors[i] = (
                list(built.turn_ids[k]),
                built.step_rewards[k],
                built.anchors[k],
            )
        return TurnCreditInputs(turn_ids, steps, anchors, built.step_weight)
