"""Colourings are valid for direct recovery on random patterns, and compress the patterns that matter."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from anvil.ad.coloring import color_columns, column_period, seed_matrix, star_color, star_recovery


@pytest.mark.parametrize("seed", range(30))
def test_column_colouring_recovers_a_random_jacobian(seed: int) -> None:
  rng = np.random.default_rng(seed)
  m, n = rng.integers(1, 25, size=2)
  dense = np.where(rng.random((m, n)) < rng.uniform(0.05, 0.5), rng.normal(size=(m, n)), 0.0)
  pattern = sp.csc_array(dense)
  colors = color_columns(pattern)
  compressed = dense @ seed_matrix(colors, n).T  # (m, colours)
  rows, cols = np.nonzero(dense)
  np.testing.assert_array_equal(compressed[rows, colors[cols]], dense[rows, cols])


@pytest.mark.parametrize("seed", range(30))
def test_star_colouring_recovers_a_random_symmetric_hessian(seed: int) -> None:
  rng = np.random.default_rng(seed)
  n = int(rng.integers(1, 30))
  mask = rng.random((n, n)) < rng.uniform(0.05, 0.4)
  mask = mask | mask.T | np.eye(n, dtype=bool)
  h = np.where(mask, rng.normal(size=(n, n)), 0.0)
  h = h + h.T
  colors = star_color(sp.csc_array(mask.astype(float)))
  assert all(colors[i] != colors[j] for i, j in zip(*np.nonzero(mask), strict=True) if i != j)
  upper = sp.csc_array(np.triu(mask).astype(float))
  at_row, at_color = star_recovery(upper, colors)
  cols = np.repeat(np.arange(n), np.diff(upper.indptr))
  np.testing.assert_allclose((h @ seed_matrix(colors, n).T)[at_row, at_color], h[upper.indices, cols], rtol=1e-13)


def test_colour_counts() -> None:
  tridiagonal = sp.csc_array(np.eye(40) + np.eye(40, k=1) + np.eye(40, k=-1))
  assert color_columns(tridiagonal).max() + 1 == 3
  arrow = np.eye(30)
  arrow[0, :] = arrow[:, 0] = 1
  assert color_columns(sp.csc_array(arrow)).max() + 1 == 30  # distance-2: every column meets row 0
  assert star_color(sp.csc_array(arrow)).max() + 1 == 2  # symmetric: the hub and everything else
  assert color_columns(sp.csc_array((5, 7))).max() + 1 == 1


def test_column_period_finds_stage_structure() -> None:
  stage = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
  banded = sp.block_diag([sp.csc_array(stage)] * 10, format="csc")
  assert column_period(banded) == 3
  assert column_period(sp.csc_array(np.ones((3, 40)))) == 1  # every column alike: no shift, no stages
  rng = np.random.default_rng(0)
  assert column_period(sp.random_array((50, 50), density=0.1, rng=rng, format="csc")) == 1
