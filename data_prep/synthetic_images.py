"""Procedural look-alike images for the synthetic KB: families of blob layouts, variants, noisy query views.

An entity's look is a background colour plus ``NUM_BLOBS`` soft coloured blobs. Entities of one family
share a layout and differ by small shifts of colour and position (``variant_scale``), plus a tiny
corner mark unique to the entity: the kind of detail a VLM can compare but a global colour-layout
feature averages away. A query view re-renders the entity with position/colour jitter and pixel noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NUM_BLOBS = 4
MARK_CELLS = 3  # the corner mark is a MARK_CELLS x MARK_CELLS binary glyph


@dataclass
class Looks:
    """Rendering parameters of n images (arrays with a leading n axis)."""

    background: np.ndarray  # (n, 3) in [0, 1]
    centres: np.ndarray  # (n, NUM_BLOBS, 2) in [0, 1]
    radii: np.ndarray  # (n, NUM_BLOBS) as a fraction of the side
    colours: np.ndarray  # (n, NUM_BLOBS, 3) in [0, 1]
    marks: np.ndarray  # (n, MARK_CELLS * MARK_CELLS) bool

    def take(self, rows: np.ndarray) -> Looks:
        """The looks of the given rows."""
        return Looks(
            self.background[rows], self.centres[rows], self.radii[rows], self.colours[rows], self.marks[rows]
        )


def family_looks(rng: np.random.Generator, num_families: int) -> Looks:
    """Independent base looks, one per family (marks are unset)."""
    return Looks(
        background=rng.uniform(0.0, 1.0, (num_families, 3)),
        centres=rng.uniform(0.15, 0.85, (num_families, NUM_BLOBS, 2)),
        radii=rng.uniform(0.08, 0.22, (num_families, NUM_BLOBS)),
        colours=rng.uniform(0.0, 1.0, (num_families, NUM_BLOBS, 3)),
        marks=np.zeros((num_families, MARK_CELLS * MARK_CELLS), dtype=bool),
    )


def jitter(rng: np.random.Generator, looks: Looks, scale: float | np.ndarray) -> Looks:
    """The same looks with colours, background and blob positions moved by Gaussian noise of ``scale``.

    ``scale`` is a float or an (n, 1) array of per-image scales.
    """
    n = len(looks.background)
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64).reshape(-1, 1), (n, 1))  # (n, 1)
    return Looks(
        background=np.clip(looks.background + rng.normal(0, 1, (n, 3)) * s, 0, 1),
        centres=np.clip(
            looks.centres + rng.normal(0, 1, looks.centres.shape) * (s[:, :, None] * 0.5), 0.05, 0.95
        ),
        radii=np.clip(looks.radii * np.exp(rng.normal(0, 1, looks.radii.shape) * s * 0.5), 0.04, 0.3),
        colours=np.clip(looks.colours + rng.normal(0, 1, looks.colours.shape) * s[:, :, None], 0, 1),
        marks=looks.marks.copy(),
    )


def entity_marks(indices: np.ndarray) -> np.ndarray:
    """A distinct corner glyph per entity index: bits of a multiplicative hash (shape (n, cells))."""
    hashed = (indices.astype(np.uint64) * np.uint64(2654435761)) >> np.uint64(7)
    bits = (hashed[:, None] >> np.arange(MARK_CELLS * MARK_CELLS, dtype=np.uint64)) & np.uint64(1)
    return bits.astype(bool)


def render(
    looks: Looks, size: int, rng: np.random.Generator | None = None, pixel_noise: float = 0.0
) -> np.ndarray:
    """Draw the images: (n, size, size, 3) uint8."""
    n = len(looks.background)
    axis = (np.arange(size, dtype=np.float32) + 0.5) / size
    ys, xs = np.meshgrid(axis, axis, indexing="ij")  # (size, size)
    image = np.broadcast_to(looks.background[:, None, None, :], (n, size, size, 3)).astype(np.float32)
    for b in range(NUM_BLOBS):
        cx = looks.centres[:, b, 0, None, None]
        cy = looks.centres[:, b, 1, None, None]
        r2 = 2.0 * looks.radii[:, b, None, None] ** 2
        weight = np.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / r2)[..., None]  # (n, size, size, 1)
        image = image * (1.0 - weight) + looks.colours[:, None, None, b, :] * weight
    cell = max(1, size // 16)
    for c in range(MARK_CELLS * MARK_CELLS):
        y0, x0 = cell * (1 + c // MARK_CELLS), cell * (1 + c % MARK_CELLS)
        on = looks.marks[:, c, None, None, None]
        image[:, y0 : y0 + cell, x0 : x0 + cell, :] = np.where(on, 0.0, 1.0)
    if pixel_noise > 0 and rng is not None:
        image = image + rng.normal(0, pixel_noise, image.shape).astype(np.float32)
    return (np.clip(image, 0, 1) * 255 + 0.5).astype(np.uint8)
