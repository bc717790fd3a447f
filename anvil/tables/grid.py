"""One dimension of a lookup table: its grid, the interval a point falls in, and the local basis on each interval.

A table of degree k is a tensor product of piecewise polynomials: along each axis, interval i = [g_i, g_{i+1}) holds
k + 1 basis functions of u = x - g_i (`basis[i, j, a]`: the coefficient of u^j in the a-th function) that multiply the
table's coefficients `starts[i] .. starts[i] + k`. Degree 1 is linear interpolation between
the two nodes (coefficients = values); degree 3 is the C² cubic B-spline with not-a-knot ends (scipy's
`make_interp_spline(k=3)`, CasADi's "bspline"), its coefficients solved from the values once, by scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tinygrad import Tensor, dtypes

Array = NDArray[np.float64]
#: A table's Tensor in the traced function's dtype (its int tables as int32), made once per table and dtype.
Constant = Callable[[str, np.ndarray], Tensor]
#: The uniform cubic B-spline's four functions on a knot interval, in t = u / h: [j, a] the coefficient of t^j.
UNIFORM_CUBIC = np.array([[1, 4, 1, 0], [-3, 0, 3, 0], [3, -6, 3, 0], [-1, 3, -3, 1]]) / 6
#: Where an uneven cubic axis samples each interval's basis functions (fractions of the interval) to read off their
#: polynomials.
SAMPLES = np.array([0.0, 0.25, 0.5, 0.75])
#: Grid spacings equal to this relative tolerance make an axis uniform: its interval is found by one division.
UNIFORM_TOLERANCE = 1e-12


@dataclass(frozen=True, eq=False)
class Axis:
  """A strictly increasing grid of n >= 2 nodes (n >= 4 for degree 3) along one input dimension."""

  grid: Array
  degree: int

  @property
  def size(self) -> int:
    """The number of nodes."""
    return len(self.grid)

  @cached_property
  def uniform(self) -> bool:
    """Whether the nodes are evenly spaced (then the interval of x is found in O(1), else by binary search)."""
    spacing = np.diff(self.grid)
    return bool(np.all(np.abs(spacing - spacing.mean()) <= UNIFORM_TOLERANCE * spacing.mean()))

  @cached_property
  def _knots(self) -> Array:
    """The knots of the cubic B-spline with not-a-knot ends (the nodes but 1 and n - 2; the ends four times)."""
    from scipy.interpolate import make_interp_spline  # NOTE: scipy.interpolate is imported when a table needs it

    return make_interp_spline(self.grid, np.zeros(self.size), k=3).t

  @property
  def shifted(self) -> bool:
    """Whether interval i's basis multiplies coefficients i - 1 .. i + 2 (clipped): the not-a-knot B-spline of an
    uneven cubic axis, whose knots skip nodes 1 and n - 2. Linear axes and even cubic ones start at coefficient i."""
    return self.degree == 3 and not self.uniform

  @property
  def coefficient_count(self) -> int:
    """Coefficients along this axis: n, or n + 2 for an even cubic axis (the uniform B-spline basis extends one knot
    interval beyond each end)."""
    return self.size + 2 if self.degree == 3 and self.uniform else self.size

  @cached_property
  def starts(self) -> NDArray[np.int64]:
    """The first table coefficient each interval's basis multiplies, (n - 1,)."""
    i = np.arange(self.size - 1)
    return np.clip(i - 1, 0, self.size - 4) if self.shifted else i

  @cached_property
  def basis(self) -> Array:
    """(n - 1, k + 1, k + 1): on interval i, basis function a is Σ_j basis[i, j, a] u^j. An even cubic axis has the
    uniform B-spline's four functions on every interval (no table to read); an uneven one the not-a-knot B-spline's."""
    h = np.diff(self.grid)
    if self.degree == 1:
      return np.stack([np.stack([np.ones_like(h), np.zeros_like(h)], 1), np.stack([-1 / h, 1 / h], 1)], 1)
    if self.uniform:
      scale = (1 / h.mean()) ** np.arange(4)
      return np.broadcast_to((UNIFORM_CUBIC * scale[:, None])[None], (len(h), 4, 4)).copy()
    from scipy.interpolate import BSpline

    # NOTE: each interval's four functions sampled at four points (sparse: the design matrix), their cubics solved
    at = h[:, None] * SAMPLES
    design = BSpline.design_matrix((self.grid[:-1, None] + at).ravel(), self._knots, 3).tocsr()
    rows = np.repeat(np.arange(design.shape[0]), 4)
    columns = np.repeat(self.starts, 4)[:, None] + np.arange(4)
    sampled = np.asarray(design[rows, columns.ravel()]).reshape(len(h), 4, 4)  # [interval, point, function]
    cubics = np.linalg.solve(np.vander(SAMPLES, 4, increasing=True), sampled)  # [interval, power of t, function]
    return cubics / h[:, None, None] ** np.arange(4)[None, :, None]

  def _uniform_coefficients(self, values: Array) -> Array:
    """The uniform B-spline coefficients (n + 2, ...) of the not-a-knot spline through `values` (n, ...): it is a C²
    cubic with knots at the nodes, so the uniform basis on the extended knots holds it exactly; found by collocation
    at the nodes and the end intervals' midpoints (a banded system, solved sparse)."""
    from scipy.interpolate import BSpline, make_interp_spline
    from scipy.sparse.linalg import spsolve

    g, n = self.grid, self.size
    samples = np.r_[g, (g[0] + g[1]) / 2, (g[-2] + g[-1]) / 2]
    knots = g[0] + (g[-1] - g[0]) / (n - 1) * np.arange(-3, n + 3)
    collocation = BSpline.design_matrix(samples, knots, 3, extrapolate=True).tocsc()
    flat = values.reshape(n, -1)
    solved = spsolve(collocation, make_interp_spline(g, flat, k=3)(samples))
    return np.asarray(solved).reshape(n + 2, *values.shape[1:])

  @cached_property
  def buckets(self) -> tuple[NDArray[np.int32], int] | None:
    """For an uneven grid: the interval at the start of each of 2(n - 1) equal buckets, and how many nodes at most
    the three buckets from any one hold (the forward steps from a bucket's interval); None when nodes cluster so that
    a binary search is shorter."""
    count = 2 * (self.size - 1)
    edges = self.grid[0] + (self.grid[-1] - self.grid[0]) * np.arange(count + 1) / count
    starts = np.clip(np.searchsorted(self.grid, edges, side="right") - 1, 0, self.size - 2)
    steps = int(np.max(starts[np.minimum(np.arange(count) + 3, count)] - starts[:-1]))
    return (starts[:-1].astype(np.int32), steps) if steps <= max(4, self.size.bit_length()) else None

  def coefficients(self, values: Array, axis: int) -> Array:
    """The table coefficients along `axis` of `values` (the values themselves for degree 1)."""
    if self.degree == 1:
      return values
    if self.uniform:
      return np.moveaxis(self._uniform_coefficients(np.moveaxis(values, axis, 0)), 0, axis)
    from scipy.interpolate import make_interp_spline

    return np.moveaxis(make_interp_spline(self.grid, np.moveaxis(values, axis, 0), k=3).c, 0, axis)

  def start(self, i: Tensor) -> Tensor:
    """The first table coefficient interval i's basis multiplies (`starts`, in closed form)."""
    return (i - 1).maximum(0).minimum(self.size - 4) if self.shifted else i

  def interval(self, x: Tensor, constant: Constant) -> Tensor:
    """The interval i of each x (int32, 0 .. n - 2) with g_i <= x < g_{i+1}, the first below g_0 and the last from
    g_{n-1} on (CasADi's convention: a node belongs to the interval on its right). An even grid finds it by one
    division, an uneven one from a bucket's interval in a few steps (or by binary search where nodes cluster)."""
    n, grid, span = self.size, constant("grid", self.grid), float(self.grid[-1] - self.grid[0])
    if self.uniform:  # NOTE: the division may round across a node: one step back or forward, on the stored nodes
      i = _scaled_floor(x, float(self.grid[0]), (n - 1) / span, n - 2)
      i = i - (x < take(grid, i)).cast(dtypes.int32) + (x >= take(grid, i + 1)).cast(dtypes.int32)
      return i.maximum(0).minimum(n - 2)
    if self.buckets is None:
      return self._binary_search(x, grid)
    starts, steps = self.buckets
    bucket = (_scaled_floor(x, float(self.grid[0]), len(starts) / span, len(starts) - 1) - 1).maximum(0)
    first = take(constant("buckets", starts), bucket)
    ahead = [(x >= take(grid, (first + k).minimum(n - 1))).cast(dtypes.int32) for k in range(1, steps + 1)]
    return (first + sum(ahead[1:], ahead[0]) if ahead else first).minimum(n - 2)

  def _binary_search(self, x: Tensor, grid: Tensor) -> Tensor:
    """The interval by bisection: ceil(log2(n - 1)) steps."""
    i, step = Tensor.zeros(*x.shape, dtype=dtypes.int32), 1 << max(self.size - 2, 1).bit_length() - 1
    while step:
      candidate = (i + step).minimum(self.size - 2)
      i = (take(grid, candidate) <= x).where(candidate, i)
      step //= 2
    return i

  def polynomials(self, x: Tensor, i: Tensor, name: str, table: Array, constant: Constant, extrapolation: str
                  ) -> list[Tensor]:  # fmt: skip
    """The q polynomials of `table` (n - 1, k + 1, q: per interval, the coefficient of u^j in polynomial a) at each x
    in its interval i, u = x - g_i; outside the grid as `extrapolation` says. Coefficients equal on every interval
    are constants, the others are read from the table."""
    k, q = table.shape[1], table.shape[2]
    flat = constant(name, table.reshape(-1))
    u = x - take(constant("grid", self.grid), i).detach()
    same = np.all(table == table[:1], axis=0)
    row = i * (k * q)
    coefficient = lambda j, a: float(table[0, j, a]) if same[j, a] else take(flat, row + (j * q + a)).detach()
    values = []
    for a in range(q):
      value = coefficient(k - 1, a)
      for j in range(k - 2, -1, -1):
        value = value * u + coefficient(j, a)
      values.append(self._extrapolated(x, u, value, table[:, :, a], extrapolation))
    return values

  def _extrapolated(self, x: Tensor, u: Tensor, value: Any, table: Array, extrapolation: str) -> Tensor:
    """A polynomial's `value` outside the grid (inside, and for "polynomial", unchanged); `table` (n - 1, k + 1) its
    coefficients."""
    if not isinstance(value, Tensor):
      value = Tensor.full(x.shape, value, dtype=x.dtype)
    if extrapolation == "polynomial":
      return value
    below, above = x < float(self.grid[0]), x > float(self.grid[-1])
    if extrapolation in ("zero", "error"):
      return (below | above).where(0.0 if extrapolation == "zero" else math.nan, value)
    h = float(self.grid[-1] - self.grid[-2])
    powers = np.arange(table.shape[1])
    low, low_slope = float(table[0, 0]), float(table[0, 1])
    high = float(table[-1] @ h**powers)
    high_slope = float(table[-1, 1:] @ (powers[1:] * h ** powers[:-1]))
    if extrapolation == "constant":
      return below.where(low, above.where(high, value))
    return below.where(low + low_slope * u, above.where(high + high_slope * (u - h), value))


def take(table: Tensor, index: Tensor) -> Tensor:
  """table[index] for a 1-D table and an int32 index of any shape: tinygrad's gather (a one-hot sum, which its kernels
  fold into one load), without `Tensor.__getitem__`'s wrap of negative indices."""
  hot = index.unsqueeze(-1) == Tensor.arange(table.shape[0], dtype=dtypes.int32)
  return hot.where(table, 0).sum(-1, dtype=table.dtype)


def _scaled_floor(x: Tensor, origin: float, scale: float, top: int) -> Tensor:
  """floor((x - origin) * scale) within 0 .. top, as int32 (NaN gives 0: never a float cast out of range)."""
  guess = ((x - origin) * scale).floor()
  return (guess >= 1).where(guess.minimum(top), 0).cast(dtypes.int32)
