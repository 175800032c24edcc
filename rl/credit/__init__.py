"""Turn-level credit: the ``turn_credit`` advantage estimator (registered with verl on import) and its inputs."""

from ragym.rl.credit.turn_credit import (
    TURN_CREDIT,
    TurnCreditInputs,
    compute_turn_credit_advantage,
    turn_credit_batch,
)

__all__ = ["TURN_CREDIT", "TurnCreditInputs", "compute_turn_credit_advantage", "turn_credit_batch"]
