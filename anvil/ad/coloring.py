"""Graph colouring for compressed evaluation of sparse derivatives.

Columns of a Jacobian that share no row can be evaluated together with one seed (their sum): a colouring of the
column intersection graph. A symmetric Hessian needs fewer colours: a star colouring still recovers every entry
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


def star_color(pattern: sp.csc_array) -> NDArray[np.int64]:
  """A star colouring of a symmetric pattern (greedy, Gebremedhin, Manne and Pothen): adjacent vertices differ and every
  path on four vertices uses at least three colours, so each Hessian entry is recovered directly from H·S (see
  `star_recovery`) with fewer colours than a column colouring needs.

  Vertex v, largest degree first, takes the smallest colour not forbidden: its neighbours' colours, and the colour of
  every coloured x two steps away through w unless w is coloured and x has no other neighbour of w's colour (a
  neighbour count per colour answers that; each vertex's two-step paths are one vectorized pass).

  Args:
    pattern: a symmetric sparsity pattern (values ignored; the diagonal does not matter).
  """
  adj = sp.csr_array(pattern, dtype=bool)
  adj.setdiag(False)
  adj.eliminate_zeros()
  n, indptr, indices = adj.shape[0], adj.indptr, adj.indices
  degree = np.diff(indptr)
  colors = np.full(n, -1, dtype=np.int64)
  counts = np.zeros((n, 8), dtype=np.int32)  # counts[x, c]: x's neighbours of colour c (widened as colours appear)
  forbidden = np.full(n + 1, -1, dtype=np.int64)
  for v in np.argsort(-degree, kind="stable"):
    ws = indices[indptr[v] : indptr[v + 1]]
    w_colors = colors[ws]
    forbidden[w_colors[w_colors >= 0]] = v
    # the paths v - w - x: x over w's neighbours, for every neighbour w at once
    lengths = degree[ws]
    w_of = np.repeat(np.arange(ws.size), lengths)
    xs = indices[np.repeat(indptr[ws] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())]
    c_w, c_x = w_colors[w_of], colors[xs]
    shares = counts[xs, np.maximum(c_w, 0)] >= 2  # x has a neighbour other than w of w's colour
    forbidden[c_x[(xs != v) & (c_x >= 0) & ((c_w < 0) | shares)]] = v
    colors[v] = color = int(np.argmax(forbidden != v))
    if color >= counts.shape[1]:
      counts = np.concatenate([counts, np.zeros_like(counts)], axis=1)
    counts[ws, color] += 1
  return colors


def star_recovery(pattern: sp.csc_array, colors: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
  """For each stored entry (i, j) of `pattern` (CSC order): the row and colour of H·S that holds H[i, j].

  H[i, j] sits at row i, column colour(j) when j is i's only neighbour of that colour, else at row j, column colour(i).
  """
  adj = sp.csr_array(pattern + pattern.T, dtype=bool)
  cols = np.repeat(np.arange(pattern.shape[1]), np.diff(pattern.indptr))
  rows = pattern.indices.astype(np.int64)
  at_row, at_color = rows.copy(), colors[cols].copy()
  for k, (i, j) in enumerate(zip(rows, cols, strict=True)):
    if i == j:
      continue
    others = adj.indices[adj.indptr[i] : adj.indptr[i + 1]]
    if np.count_nonzero(colors[others[others != j]] == colors[j]) > 0:
      at_row[k], at_color[k] = j, colors[i]
  return at_row, at_color


def column_period(pattern: sp.csc_array, max_period: int = 32, min_repeats: int = 3) -> int:
  """The stage length of a stage-structured pattern: the smallest P such that column j + P has the rows of column j
  shifted by one fixed offset, for at least 80% of the columns. 1 when there is none.

  Multiple-shooting derivatives repeat every stage (P2: 5 variables per stage, rows shifted by 4); laying compressed
  results out stage by stage lets the compiler compute each stage's primal once (see anvil.ad.sparse).
  """
  p = sp.csc_array(pattern, dtype=bool)
  n = p.shape[1]
  cols = [p.indices[p.indptr[j] : p.indptr[j + 1]] for j in range(n)]
  for period in range(2, min(max_period, n // min_repeats) + 1):
    shifts = [_shift(cols[j], cols[j + period]) for j in range(n - period)]
    counts = np.unique([s for s in shifts if s is not None], return_counts=True)[1]
    if counts.size and counts.max() >= 0.8 * (n - period) and any(s not in (None, 0) for s in shifts):
      return period
  return 1


def _shift(a: NDArray[np.int32], b: NDArray[np.int32]) -> int | None:
  """The offset d with b == a + d, if any (empty columns match nothing)."""
  if a.size == 0 or a.size != b.size:
    return None
  d = int(b[0]) - int(a[0])
  return d if np.array_equal(a + d, b) else None
