"""benchmarks/host_memory.py extrapolates from the recipe it names and fits RSS growth after the warm-up steps."""

from __future__ import annotations

import pytest

from benchmarks.host_memory import _budget, _slope


def test_the_budget_is_the_7b_recipes_one_query_image_and_three_batches_of_five_candidates() -> None:
    # 1,024 and 256 visual tokens of 28 x 28 pixels; K = 5 candidates x (Rej_max 2 + 1) batches.
    assert _budget("kbvqa_qwen2_5_vl_7b") == (1024 * 28 * 28, 256 * 28 * 28, 1, 15)


def test_growth_is_the_slope_after_the_warm_steps() -> None:
    mb = 1 << 20
    # 100 MB allocated by the first step, then 2 MB a step.
    assert _slope([100 * mb, 102 * mb, 104 * mb, 106 * mb], warm=1) == pytest.approx(2 * mb)
    with pytest.raises(ValueError, match="--warm-steps"):
        _slope([1, 2, 3], warm=2)
