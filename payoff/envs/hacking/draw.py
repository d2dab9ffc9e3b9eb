"""Tiny NumPy raster helpers for grid envs' rgb_array rendering (no pygame needed)."""

from __future__ import annotations

import numpy as np


def fill_cell(
    image: np.ndarray, row: int, col: int, color: tuple[int, int, int], cell: int, margin: int = 0
) -> None:
    image[
        row * cell + margin : (row + 1) * cell - margin,
        col * cell + margin : (col + 1) * cell - margin,
    ] = color


def disc(
    image: np.ndarray, row: int, col: int, color: tuple[int, int, int], cell: int, radius: float
) -> None:
    ys, xs = np.ogrid[:cell, :cell]
    centre = (cell - 1) / 2
    mask = (ys - centre) ** 2 + (xs - centre) ** 2 <= (radius * cell) ** 2
    block = image[row * cell : (row + 1) * cell, col * cell : (col + 1) * cell]
    block[mask] = color
