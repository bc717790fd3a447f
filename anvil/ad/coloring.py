"""Graph colouring for compressed evaluation of sparse derivatives.

Columns of a Jacobian that share no row can be evaluated together with one seed (their sum): a colouring of the
column intersection graph. For a symmetric Hessian the same column colouring of the full pattern recovers every entry
directly from the compressed product H·S.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray


def color_columns(pattern: sp.csc_array) -> NDArray[np.int64]:
  """A colour per column such that no two columns sharing a row have the same colour (greedy, largest degree first).

  Args:
    pattern: the sparsity pattern (values ignored).

  Returns:
    colours in [0, number of colours), one per column.
  """
  p = sp.csc_array(pattern, dtype=bool)
  p.data[:] = True
  conflicts = sp.csr_array(p.T @ p)
  n = p.shape[1]
  colors = np.full(n, -1, dtype=np.int64)
  order = np.argsort(-np.diff(conflicts.indptr), kind="stable")
  for j in order:
    neighbours = conflicts.indices[conflicts.indptr[j] : conflicts.indptr[j + 1]]
    used = colors[neighbours]
    taken = np.zeros(len(neighbours) + 1, dtype=bool)
    taken[used[(used >= 0) & (used <= len(neighbours))]] = True
    colors[j] = int(np.argmin(taken))
  return colors


def seed_matrix(colors: NDArray[np.int64], n: int) -> NDArray[np.float64]:
  """(number of colours, n) seeds: row c sums the unit vectors of the columns coloured c."""
  count = int(colors.max()) + 1 if colors.size else 0
  seeds = np.zeros((count, n))
  seeds[colors, np.arange(n)] = 1.0
  return seeds


def check_colouring(pattern: sp.csc_array, colors: NDArray[np.int64]) -> bool:
  """Whether every row meets each colour at most once (the colouring is valid for direct recovery)."""
  p = sp.csr_array(pattern, dtype=bool)
  for i in range(p.shape[0]):
    row_colors = colors[p.indices[p.indptr[i] : p.indptr[i + 1]]]
    if len(np.unique(row_colors)) != len(row_colors):
      return False
  return True
