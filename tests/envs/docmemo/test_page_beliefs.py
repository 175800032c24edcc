"""PageBeliefs against hand-computed cases, Thompson sampling statistics, and the lambda schedule."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ragym.envs import PageBeliefs
from ragym.envs.docmemo.beliefs import lambda_schedule, minmax_normalise


def test_prior_from_similarity():
    b = PageBeliefs([0.0, 0.25, 1.0], kappa=4.0)
    np.testing.assert_allclose(b.alpha, [1.0, 2.0, 5.0])
    np.testing.assert_allclose(b.beta, [5.0, 4.0, 1.0])
    np.testing.assert_allclose(b.mean(), [1 / 6, 2 / 6, 5 / 6])


# (num_pages, radius, decay, useful, irrelevant, expected alpha increment, expected beta increment)
UPDATE_CASES = [
    # one useful page in the middle, radius 2: +1 on itself, decay^1 and decay^2 on each side
    (7, 2, 0.5, [3], [], [0, 0.25, 0.5, 1, 0.5, 0.25, 0], [0] * 7),
    # overlapping neighbourhoods add up: pages 2 and 4 both reach page 3 (0.5 + 0.5) and each other (0.25)
    (7, 2, 0.5, [2, 4], [], [0.25, 0.5, 1.25, 1.0, 1.25, 0.5, 0.25], [0] * 7),
    # adjacent useful pages: each also receives its neighbour's propagation
    (5, 1, 0.3, [1, 2], [], [0.3, 1.3, 1.3, 0.3, 0], [0] * 5),
    # document edges: neighbours beyond page 0 and page N-1 are dropped, nothing wraps around
    (4, 2, 0.5, [0, 3], [], [1, 0.5 + 0.25, 0.25 + 0.5, 1], [0] * 4),
    # negative feedback is not propagated: only the marked page's beta moves
    (5, 2, 0.5, [], [2], [0] * 5, [0, 0, 1, 0, 0]),
    # both kinds at once, irrelevant page inside a useful page's neighbourhood still gains alpha
    (5, 1, 0.5, [1], [2], [0.5, 1, 0.5, 0, 0], [0, 0, 1, 0, 0]),
    # duplicates in a mark list count once; radius 0 disables propagation
    (3, 0, 0.5, [1, 1], [], [0, 1, 0], [0, 0, 0]),
]


@pytest.mark.parametrize("num_pages,radius,decay,useful,irrelevant,d_alpha,d_beta", UPDATE_CASES)
def test_update_hand_computed(num_pages, radius, decay, useful, irrelevant, d_alpha, d_beta):
    sim = np.linspace(0.0, 1.0, num_pages)
    b = PageBeliefs(sim, kappa=2.0, radius=radius, decay=decay)
    alpha0, beta0 = b.alpha.copy(), b.beta.copy()
    b.update(useful, irrelevant)
    np.testing.assert_allclose(b.alpha - alpha0, d_alpha)
    np.testing.assert_allclose(b.beta - beta0, d_beta)


def test_updates_accumulate_over_rounds():
    b = PageBeliefs([0.5] * 3, kappa=0.0, radius=1, decay=0.5)
    b.update([0], [])
    b.update([0], [2])
    np.testing.assert_allclose(b.alpha, [3.0, 2.0, 1.0])
    np.testing.assert_allclose(b.beta, [1.0, 1.0, 2.0])


@pytest.mark.parametrize(
    "useful,irrelevant,message",
    [
        ([5], [], "outside"),
        ([-1], [], "outside"),
        ([], [9], "outside"),
        ([1], [1], "both useful and irrelevant"),
    ],
)
def test_bad_feedback_is_an_error(useful, irrelevant, message):
    b = PageBeliefs([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=message):
        b.update(useful, irrelevant)


@pytest.mark.parametrize("similarity", [[], [1.5, 0.0], [np.nan, 0.5], [[0.1, 0.2]]])
def test_bad_similarity_is_an_error(similarity):
    with pytest.raises(ValueError):
        PageBeliefs(similarity)


def test_thompson_draws_match_posterior_means():
    b = PageBeliefs([0.0, 0.5, 1.0], kappa=6.0)
    b.update([2], [0])
    rng = np.random.default_rng(0)
    draws = np.stack([b.sample(rng) for _ in range(20000)])  # (20000, 3)
    assert draws.min() >= 0.0 and draws.max() <= 1.0
    np.testing.assert_allclose(draws.mean(axis=0), b.mean(), atol=0.01)
    # Beta variance: mean (1 - mean) / (alpha + beta + 1)
    expected_var = b.mean() * (1 - b.mean()) / (b.alpha + b.beta + 1)
    np.testing.assert_allclose(draws.var(axis=0), expected_var, rtol=0.1)


def test_thompson_draw_is_reproducible_from_the_generator():
    b = PageBeliefs(np.linspace(0, 1, 10))
    assert np.array_equal(b.sample(np.random.default_rng(3)), b.sample(np.random.default_rng(3)))
    assert not np.array_equal(b.sample(np.random.default_rng(3)), b.sample(np.random.default_rng(4)))


def test_lambda_schedule_decreases_geometrically():
    values = [lambda_schedule(t, 0.8, 0.5) for t in range(4)]
    np.testing.assert_allclose(values, [0.8, 0.4, 0.2, 0.1])
    assert lambda_schedule(0, 0.6, 1.0) == lambda_schedule(5, 0.6, 1.0) == 0.6
    with pytest.raises(ValueError):
        lambda_schedule(-1, 0.8, 0.5)


@pytest.mark.parametrize(
    "values,expected",
    [([2.0, 4.0, 3.0], [0.0, 1.0, 0.5]), ([0.3, 0.3], [0.5, 0.5]), ([-1.0, 1.0], [0.0, 1.0])],
)
def test_minmax_normalise(values, expected):
    np.testing.assert_allclose(minmax_normalise(values), expected)


def test_a_radius_beyond_the_document_costs_no_more_than_the_document():
    """Propagation walked every distance up to the radius, pages or not: radius 10**6 over 5 pages took seconds
    per update (10**9, hours). Distances past the last page reach nothing, so they are not walked."""
    wide, whole = PageBeliefs([0.5] * 5, radius=10**6), PageBeliefs([0.5] * 5, radius=4)
    start = time.perf_counter()
    wide.update([1], [3])
    assert time.perf_counter() - start < 1.0
    whole.update([1], [3])
    np.testing.assert_allclose(wide.alpha, whole.alpha)
    np.testing.assert_allclose(wide.beta, whole.beta)
