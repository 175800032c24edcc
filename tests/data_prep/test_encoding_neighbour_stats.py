"""Neighbour statistics on sets whose answers are known by hand: a circle of evenly spaced unit vectors, flat
manifolds of known dimension, a diagonal covariance."""

from __future__ import annotations

import numpy as np
import pytest

from ragym.data_prep.encoding.neighbour_stats import lid_mle, nearest, neighbours, spectrum


def _circle(num: int) -> np.ndarray:
    """``num`` unit vectors evenly spaced on a circle, in float64: the geometry exactly, which ``neighbours``
    (float64 inner products of the neighbours faiss finds) reproduces to float64 rounding."""
    angles = 2 * np.pi * np.arange(num) / num
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)  # (num, 2)


def test_nearest_leaves_the_row_itself_out() -> None:
    vectors = np.array([[1, 0], [0.8, 0.6], [0, 1], [-1, 0]], dtype=np.float32)
    sims = nearest(vectors, np.array([0, 2]), 2)
    np.testing.assert_allclose(sims, [[0.8, 0.0], [0.6, 0.0]], atol=1e-6)


def test_circle_neighbours_match_the_geometry() -> None:
    """On a circle of 360 points (1 degree apart) every row's neighbours come in pairs at 1, 2, 3... degrees."""
    theta = np.deg2rad(1.0)
    stats = neighbours(_circle(360), k=2, num_queries=360)
    assert stats.num_queries == 360
    # neighbours 1 and 2 at 1 degree, 3 at 2 degrees; float64 throughout, so a float32 score's rounding (d_K / d_1
    # was 1 +- 1.3e-4, varying with faiss's code path) cannot pass for geometry
    assert stats.sim_first == pytest.approx(np.cos(theta), abs=1e-12)
    assert stats.sim_kth == pytest.approx(np.cos(theta), abs=1e-12)
    assert stats.gap == pytest.approx(np.cos(theta) - np.cos(2 * theta), abs=1e-12)
    chord = lambda a: 2 * np.sin(a / 2)  # noqa: E731
    assert stats.relative_gap == pytest.approx((chord(2 * theta) - chord(theta)) / chord(theta), rel=1e-9)
    assert stats.distance_ratio == pytest.approx(1.0, abs=1e-9)


def test_lid_recovers_the_dimension_of_flat_manifolds() -> None:
    rng = np.random.default_rng(0)
    for dim in (2, 6):
        cube = rng.uniform(size=(4000, dim))
        rotation, _ = np.linalg.qr(rng.standard_normal((40, dim)))
        points = cube @ rotation.T  # (4000, 40) float64, a dim-d patch in 40-d
        rows = np.arange(0, 4000, 10)
        dist = np.sqrt(np.sum((points[rows][:, None, :] - points[None, :, :]) ** 2, axis=2))  # (400, 4000)
        dist[np.arange(len(rows)), rows] = np.inf  # the row itself
        dist = np.sort(dist, axis=1)[:, :20]
        assert lid_mle(dist) == pytest.approx(dim, rel=0.2)


def test_lid_on_hand_computed_distances() -> None:
    """Two neighbours at 1 and e: 1 / log(e / 1) = 1; at 1 and e^2: 1/2."""
    assert lid_mle(np.array([[1.0, np.e]])) == pytest.approx(1.0)
    assert lid_mle(np.array([[1.0, np.e**2]])) == pytest.approx(0.5)
    # pooled as the inverse of the mean inverse: (1 + 2) / 2 -> 2/3
    assert lid_mle(np.array([[1.0, np.e], [1.0, np.e**2]])) == pytest.approx(2 / 3)


def test_spectrum_shares_of_a_diagonal_covariance() -> None:
    rng = np.random.default_rng(1)
    stds = np.array([4.0, 2.0, 1.0, 1.0, 1.0, 1.0])  # variances 16, 4, 1 x 4: total 24
    data = rng.standard_normal((200_000, 6)) * stds
    shares = spectrum(data, tops=(1, 2))
    assert shares["top1"] == pytest.approx(16 / 24, abs=0.01)
    assert shares["top2"] == pytest.approx(20 / 24, abs=0.01)
    assert shares["pcs_for_50pct"] == 1 and shares["pcs_for_90pct"] == 4  # 20/24 < 0.9 <= 22/24
