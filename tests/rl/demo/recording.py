"""What the demos' warm-start tests record of a run: each sample's token weights and the batches they formed."""

from __future__ import annotations

from typing import Any

import pytest

from ragym.rl.tiny import warm_start

REAL_TOKEN_WEIGHTS = warm_start.token_weights
REAL_RESPONSE_LOG_PROBS = warm_start.response_log_probs
"""The functions recorded, as imported (a second run must not wrap the first's spy)."""


def record_batches(seen: dict[str, Any], patch: pytest.MonkeyPatch) -> None:
    """Record into ``seen`` each weighed sample with its weights (``weighed``) and how many samples each batch held
    (``batches``): ``imitate`` weighs a whole batch, then runs its forwards, so a forward closes a batch."""
    seen.update(weighed=[], batches=[], closed=True)

    def token_weights(sample, *args):
        weights = REAL_TOKEN_WEIGHTS(sample, *args)
        seen["weighed"].append((sample, weights))
        if seen["closed"]:
            seen["batches"].append(0)
        seen["batches"][-1] += 1
        seen["closed"] = False
        return weights

    def response_log_probs(*args, **kwargs):
        seen["closed"] = True
        return REAL_RESPONSE_LOG_PROBS(*args, **kwargs)

    patch.setattr(warm_start, "token_weights", token_weights)
    patch.setattr(warm_start, "response_log_probs", response_log_probs)
