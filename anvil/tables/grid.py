"""One dimension of a lookup table: its grid, the interval a point falls in, and the local basis on each interval.

A table of degree k is a tensor product of piecewise polynomials: along each axis, interval i = [g_i, g_{i+1}) holds
k + 1 basis functions of u = x - g_i whose coefficients (`weights[i, a, j]`, the coefficient of u^j in the a-th
function) multiply the table's coefficients `starts[i] .. starts[i] + k`. Degree 1 is linear interpolation between
the two nodes (coefficients = values); degree 3 is the C² cubic B-spline with not-a-knot ends (scipy's
`make_interp_spline(k=3)`, CasADi's "bspline"), its coefficients solved from the values once, by scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import BSpline, make_interp_spline
from tinygrad import Tensor, dtypes

Array = NDArray[np.float64]
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
  def _spline(self) -> BSpline:
    """The cubic B-spline basis with not-a-knot ends: coefficient c_j of node values e_j (identity values)."""
    return make_interp_spline(self.grid, np.eye(self.size), k=3)

  @cached_property
  def starts(self) -> NDArray[np.int64]:
    """The first table coefficient each interval's basis multiplies, (n - 1,)."""
    if self.degree == 1:
      return np.arange(self.size - 1)
    knots = self._spline.t
    return np.clip(np.searchsorted(knots, self.grid[:-1], side="right") - 1, 3, self.size - 1) - 3

  @cached_property
  def weights(self) -> Array:
    """(n - 1, k + 1, k + 1): on interval i, basis function a is Σ_j weights[i, a, j] u^j."""
    h = np.diff(self.grid)
    if self.degree == 1:
      return np.stack([np.stack([np.ones_like(h), -1 / h], 1), np.stack([np.zeros_like(h), 1 / h], 1)], 1)
    basis = BSpline(self._spline.t, np.eye(self.size), 3)  # basis function j is the spline of coefficients e_j
    rows = np.arange(self.size - 1)[:, None], self.starts[:, None] + np.arange(4)
    taylor = [basis(self.grid[:-1], nu=j)[rows] / math.factorial(j) for j in range(4)]  # each (n - 1, 4)
    return np.stack(taylor, 2)

  def coefficients(self, values: Array, axis: int) -> Array:
    """The table coefficients along `axis` of `values` (the values themselves for degree 1)."""
    if self.degree == 1:
      return values
    return np.moveaxis(make_interp_spline(self.grid, np.moveaxis(values, axis, 0), k=3).c, 0, axis)

  def end_weights(self, end: int) -> tuple[Array, Array]:
    """The basis' values and slopes at the grid's lower (end 0) or upper (end 1) node, each (k + 1,)."""
    w = self.weights[-1 if end else 0]
    u = float(self.grid[-1] - self.grid[-2]) if end else 0.0
    powers = u ** np.arange(self.degree + 1)
    slopes = np.arange(self.degree + 1) * np.r_[0.0, powers[:-1]]
    return w @ powers, w @ slopes

  def interval(self, x: Tensor) -> Tensor:
    """The interval i of each x (int32, 0 .. n - 2) with g_i <= x < g_{i+1}, the first below g_0 and the last from
    g_{n-1} on (CasADi's convention: a node belongs to the interval on its right)."""
    n, grid = self.size, Tensor(self.grid, dtype=x.dtype)
    if self.uniform:
      guess = ((x - float(self.grid[0])) * ((n - 1) / float(self.grid[-1] - self.grid[0]))).floor()
      i = (guess >= 1).where(guess.minimum(n - 2), 0).cast(dtypes.int32)  # NOTE: NaN lands on 0, never in a cast
      i = (i - (x < grid[i]).cast(dtypes.int32)).maximum(0)  # the division may round across a node: one step back
      return (i + (x >= grid[i + 1]).cast(dtypes.int32)).minimum(n - 2)  # or forward
    i, step = Tensor.zeros(*x.shape, dtype=dtypes.int32), 1 << max(n - 2, 1).bit_length() - 1
    while step:
      candidate = (i + step).minimum(n - 2)
      i = (grid[candidate] <= x).where(candidate, i)
      step //= 2
    return i

  def basis(self, x: Tensor, extrapolation: str) -> tuple[Tensor, Tensor]:
    """The first coefficient index (int32) and the k + 1 basis weights (last axis) at each x."""
    i = self.interval(x)
    k = self.degree + 1
    rows = Tensor(self.weights.reshape(-1, k * k), dtype=x.dtype)[i].reshape(*x.shape, k, k)
    u = (x - Tensor(self.grid, dtype=x.dtype)[i]).unsqueeze(-1)
    w = rows[..., k - 1]
    for j in range(k - 2, -1, -1):
      w = w * u + rows[..., j]
    start = Tensor(self.starts.astype(np.int32))[i]
    return start, self._extrapolated(x.unsqueeze(-1), u, w, extrapolation)

  def _extrapolated(self, x: Tensor, u: Tensor, w: Tensor, extrapolation: str) -> Tensor:
    """The weights w outside the grid, as `extrapolation` says (inside, and for "polynomial", unchanged)."""
    if extrapolation == "polynomial":
      return w
    below, above = x < float(self.grid[0]), x > float(self.grid[-1])
    if extrapolation in ("zero", "error"):
      outside = Tensor.full(w.shape, 0.0 if extrapolation == "zero" else math.nan, dtype=w.dtype)
      return (below | above).where(outside, w)
    (low, low_slope), (high, high_slope) = self.end_weights(0), self.end_weights(1)
    constant = extrapolation == "constant"
    h = float(self.grid[-1] - self.grid[-2])
    lower = Tensor(low, dtype=w.dtype) + (0 if constant else Tensor(low_slope, dtype=w.dtype) * u)
    upper = Tensor(high, dtype=w.dtype) + (0 if constant else Tensor(high_slope, dtype=w.dtype) * (u - h))
    return below.where(lower, above.where(upper, w))
