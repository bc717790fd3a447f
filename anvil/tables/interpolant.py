"""`anvil.interpolant`: a lookup table on a grid, traceable on Tensors and a NumericalFunction of its own."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType

from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.arg import numpy_dtype
from anvil.tables.grid import Array, Axis, Constant, take

#: The interpolation methods and their polynomial degree.
METHODS = {"linear": 1, "cubic": 3, "bspline": 3}
#: What a table does outside its grid, along each axis: continue with the end's value and slope ("linear"), hold
#: the end's value ("constant"), continue the end interval's polynomial ("polynomial"), give 0 ("zero", CasADi's
#: bspline) or NaN ("error": a numpy call raises instead).
EXTRAPOLATIONS = ("linear", "constant", "polynomial", "zero", "error")


class Interpolant(NumericalFunction[..., Any]):
  """A table of values on a d-dimensional grid, interpolated by tensor-product piecewise polynomials.

  Called on Tensors inside a traced function (a model, a cost, a constraint) it adds its evaluation to the graph:
  `x` of shape (..., d) (any shape when d = 1: one point per element) gives values of shape (...) (scalar values)
  or (..., m). On the grid's nodes it reproduces the values; its derivatives are the piecewise polynomial's, exact
  at every order, and a node belongs to the interval on its right (as in CasADi). The generated C++ finds the
  interval by one division on an evenly spaced axis and by binary search otherwise, and reads only the few
  coefficients it needs from a static table (or from its input, with `values_as_input`).

  Called on numpy arrays, it is the NumericalFunction `name(x[, data]) -> values` of one point x of shape (d,) (a
  float when d = 1); with `values_as_input` its second input is `data`, the table's coefficients for new values:
  `coefficients(values)` (the values themselves for "linear").

  Use `anvil.interpolant(...)` to make one.
  """

  def __init__(
    self,
    name: str,
    axes: Sequence[Axis],
    values: Array,
    scalar: bool,
    extrapolation: str,
    values_as_input: bool,
    device: str = "CPU",
  ) -> None:
    self.axes, self.scalar, self.extrapolation = tuple(axes), scalar, extrapolation
    self.values_as_input = values_as_input
    self._tensors: dict[tuple[int, str, DType], Tensor] = {}
    shape = tuple(a.coefficient_count for a in axes) + values.shape[len(axes) :]
    inputs = (Arg(len(axes), name="x"),) + ((Arg(shape, name="data"),) if values_as_input else ())
    super().__init__(name, self._body, inputs, device=device)
    self.data = self.coefficients(values)

  @property
  def grid(self) -> tuple[Array, ...]:
    """The grid of each dimension."""
    return tuple(a.grid for a in self.axes)

  @property
  def outputs_per_point(self) -> int:
    """m: the number of values at each grid node (1 for a scalar table)."""
    return 1 if self.scalar else self.data.shape[-1]

  def coefficients(self, values: ArrayLike) -> Array:
    """The table's data for `values` (shape (*grid sizes) or (*grid sizes, m)): what it interpolates with, and what
    a `values_as_input` table takes at run time. The values themselves for "linear"; the B-spline coefficients of
    the cubic spline through them (solved by scipy, axis by axis) for "cubic" and "bspline"."""
    data = _values(self.name, self.axes, values).reshape(*(a.size for a in self.axes), -1)
    for k, axis in enumerate(self.axes):
      data = axis.coefficients(data, k)
    return data if not self.scalar else data[..., 0]

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    """On Tensors: the table's evaluation in the traced graph; on numpy arrays: the compiled function at one point."""
    if kwargs:
      raise TypeError(f"{self.name}: takes positional inputs only, got keywords {sorted(kwargs)}")
    if len(args) != len(self.inputs):
      raise TypeError(
        f"{self.name}: takes {len(self.inputs)} inputs (x{', data' * self.values_as_input}), got {len(args)}"
      )
    if isinstance(args[0], Tensor):
      data = args[1] if self.values_as_input else None
      return self.evaluate(args[0], data)
    x = _point(self.name, len(self.axes), args[0])
    if self.extrapolation == "error":
      self._check_inside(x)
    return super().__call__(x, *args[1:])

  def evaluate(self, x: Tensor, data: Tensor | None = None) -> Tensor:
    """The table at the points x, (..., d) (any shape when d = 1), on Tensors; `data` replaces the table's
    coefficients (the shape of `coefficients(values)`)."""
    d = len(self.axes)
    if not dtypes.is_float(x.dtype):
      x = x.cast(dtypes.default_float)
    if d > 1 and (x.ndim == 0 or x.shape[-1] != d):
      raise ValueError(f"{self.name}: x must have shape (..., {d}), got {x.shape}")
    constants = [self._constants(x.dtype, k) for k in range(d)]
    points = [x] if d == 1 else [x[..., k] for k in range(d)]
    intervals = [axis.interval(p, c) for axis, p, c in zip(self.axes, points, constants, strict=True)]
    if data is None and d == 1:  # NOTE: one axis, fixed data: each interval's polynomials, read directly
      values = self.axes[0].polynomials(x, intervals[0], "pieces", self._pieces, constants[0], self.extrapolation)
    else:
      values = self._combined(points, intervals, self._table(data, x.dtype), constants, data is not None)
    return values[0] if self.scalar else Tensor.stack(*values, dim=-1)

  def _combined(self, points: list[Tensor], intervals: list[Tensor], table: Tensor, constants: list[Constant],
                runtime: bool) -> list[Tensor]:  # fmt: skip
    """The m values at each point: the coefficients of the cell's corners weighted by the axes' basis functions."""
    m = self.outputs_per_point
    weights = [a.polynomials(p, i, "basis", a.basis, c, self.extrapolation)
               for a, p, i, c in zip(self.axes, points, intervals, constants, strict=True)]  # fmt: skip
    strides = np.cumprod([1] + [a.coefficient_count for a in self.axes[:0:-1]])[::-1] * m
    starts = [a.start(i) * int(s) for a, i, s in zip(self.axes, intervals, strides, strict=True)]
    start = functools.reduce(lambda a, b: a + b, starts)
    corners: list[tuple[int, Any]] = [(0, 1.0)]  # NOTE: (offset, weight) products built axis by axis: 4^d products
    for w, stride in zip(weights, strides, strict=True):
      corners = [(offset + a * int(stride), weight * wa) for offset, weight in corners for a, wa in enumerate(w)]
    # NOTE: the coefficients read are detached (a derivative through tinygrad's gather keeps a whole masked copy of
    # the table per call: 30x slower); run-time data gets its derivative back from a term of value zero
    values: list[Tensor] = []
    for c in range(m):
      terms = []
      for offset, weight in corners:
        coefficient = take(table, start + (offset + c))
        terms.append(coefficient.detach() * weight)
        if runtime:
          terms.append((coefficient - coefficient.detach()) * weight.detach())
      values.append(functools.reduce(lambda a, b: a + b, terms))
    return values

  @cached_property
  def _pieces(self) -> Array:
    """A 1-D table's polynomial on each interval: (n - 1, k + 1, m), the coefficient of u^j in value c."""
    axis = self.axes[0]
    data = self.data.reshape(axis.coefficient_count, -1)
    corners = data[axis.starts[:, None] + np.arange(axis.degree + 1)]  # (n - 1, k + 1 corners, m)
    return np.einsum("ija,iac->ijc", axis.basis, corners)

  def _constants(self, dtype: DType, axis: int) -> Constant:
    """The Tensors of an axis's arrays (-1: the table's own) in `dtype`."""
    return lambda name, array: self._constant(dtype, axis, name, array)

  def _constant(self, dtype: DType, axis: int, name: str, array: np.ndarray) -> Tensor:
    """The Tensor of one of the table's arrays (of an axis, or -1: the table's own; floats in `dtype`, integers as
    int32), made once per dtype."""
    key = (axis, name, dtype)
    if key not in self._tensors:
      numpy = numpy_dtype(dtype) if np.issubdtype(array.dtype, np.floating) else np.int32
      self._tensors[key] = Tensor(np.ascontiguousarray(array, dtype=numpy))
    return self._tensors[key]

  def _table(self, data: Tensor | None, dtype: DType) -> Tensor:
    """The coefficients as one flat Tensor: the constant table, or the run-time `data`."""
    if data is None:
      return self._constant(dtype, -1, "data", self.data.reshape(-1))
    if tuple(data.shape) != self.data.shape:
      raise ValueError(f"{self.name}: data must have shape {self.data.shape}, got {tuple(data.shape)}")
    return data.cast(dtype).reshape(-1)

  def _body(self, x: Tensor, data: Tensor | None = None) -> Tensor:
    """The NumericalFunction's body: one point."""
    return self.evaluate(x[0] if len(self.axes) == 1 else x, data)

  def _check_inside(self, x: Array) -> None:
    """Raise if x is outside the grid (extrapolation="error")."""
    for k, (axis, value) in enumerate(zip(self.axes, x, strict=True)):
      if not axis.grid[0] <= value <= axis.grid[-1]:
        raise ValueError(
          f"{self.name}: x[{k}] = {value} is outside the grid [{axis.grid[0]}, {axis.grid[-1]}] (extrapolation='error')"
        )


def interpolant(
  name: str,
  grid: ArrayLike | Sequence[ArrayLike],
  values: ArrayLike,
  method: str = "linear",
  extrapolation: str | None = None,
  values_as_input: bool = False,
  device: str = "CPU",
) -> Interpolant:
  """A lookup table interpolating `values` on `grid`, usable on Tensors in any traced function (see `Interpolant`).

  Args:
    name: a C++ identifier, the table's name in errors and its NumericalFunction's name.
    grid: the nodes of a 1-D table (an array), or one strictly increasing array per dimension, evenly spaced or not.
    values: the value at each node: shape (n,) or (n, m) for a 1-D table; (n_1, ..., n_d) or (n_1, ..., n_d, m)
      for d dimensions (C order: the last grid dimension varies fastest, unlike CasADi's flat Fortran-order list).
    method: "linear" (multilinear: CasADi's "linear"), "cubic" (the C² not-a-knot cubic spline along each axis: scipy's
      `make_interp_spline(k=3)`; at least 4 nodes per axis) or "bspline" (the same spline, CasADi's name for it, whose
      default extrapolation is CasADi's: 0 outside the grid).
    extrapolation: outside the grid, along each axis: "linear" (default for "linear" and "cubic": the end's value and
      slope), "constant", "polynomial" (the end interval's polynomial), "zero" (default for "bspline") or "error"
      (NaN in generated code; a numpy call raises).
    values_as_input: the table's data becomes the function's second input (`coefficients(values)`), so a new table
      needs no rebuild; `values` then only gives its shape and the data of calls that do not pass one.
    device: the NumericalFunction's device.

  Example:
    >>> kappa = av.interpolant("kappa", s_nodes, curvature, method="bspline", extrapolation="linear")
    >>> def ode(x, u): ... kappa(x[0]) ...       # on Tensors, inside any traced function
    >>> kappa(12.5)                              # on numbers: the compiled function
  """
  if method not in METHODS:
    raise ValueError(f"{name}: method must be one of {sorted(METHODS)}, got {method!r}")
  extrapolation = extrapolation or ("zero" if method == "bspline" else "linear")
  if extrapolation not in EXTRAPOLATIONS:
    raise ValueError(f"{name}: extrapolation must be one of {EXTRAPOLATIONS}, got {extrapolation!r}")
  axes = _axes(name, grid, METHODS[method])
  data = _values(name, axes, values)
  scalar = data.ndim == len(axes)
  return Interpolant(name, axes, data, scalar, extrapolation, bool(values_as_input), device)


def _axes(name: str, grid: ArrayLike | Sequence[ArrayLike], degree: int) -> list[Axis]:
  """One checked Axis per grid dimension."""
  nodes = [grid] if np.ndim(np.asarray(grid, dtype=object)[0]) == 0 else list(grid)  # type: ignore[arg-type]
  axes = []
  for k, g in enumerate(nodes):
    what = f"{name}: grid[{k}]"
    try:
      array = np.asarray(g, dtype=np.float64)
    except (TypeError, ValueError) as e:
      raise TypeError(f"{what} must be an array of numbers ({e})") from None
    if array.ndim != 1:
      raise ValueError(f"{what} must be 1-D, got shape {array.shape}")
    if len(array) < degree + 1:
      raise ValueError(
        f"{what} has {len(array)} nodes; degree {degree} needs at least {degree + 1}"
        + (" (use method='linear' for fewer)" if degree > 1 else "")
      )
    if not np.all(np.isfinite(array)):
      raise ValueError(f"{what} contains NaN or inf")
    if np.any(np.diff(array) <= 0):
      k0 = int(np.argmax(np.diff(array) <= 0))
      raise ValueError(f"{what} must be strictly increasing: node {k0 + 1} ({array[k0 + 1]}) follows {array[k0]}")
    axes.append(Axis(array, degree))
  return axes


def _values(name: str, axes: Sequence[Axis], values: ArrayLike) -> NDArray[np.float64]:
  """The checked values: shape (*sizes) or (*sizes, m), finite."""
  try:
    array = np.asarray(values, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise TypeError(f"{name}: values must be an array of numbers ({e})") from None
  sizes = tuple(a.size for a in axes)
  if array.shape[: len(sizes)] != sizes or array.ndim > len(sizes) + 1:
    raise ValueError(
      f"{name}: values must have shape {sizes} or {(*sizes, 'm')} for the grid's sizes, got {array.shape}"
    )
  if not np.all(np.isfinite(array)):
    where = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
    raise ValueError(f"{name}: values contain NaN or inf (first at index {where})")
  return array


def _point(name: str, d: int, x: Any) -> NDArray[np.float64]:
  """One point of a numpy call, (d,)."""
  array = np.asarray(x, dtype=np.float64)
  if array.shape not in ((d,), () if d == 1 else (d,)):
    raise ValueError(f"{name}: x must have shape ({d},){' or be a number' * (d == 1)}, got {array.shape}")
  return array.reshape(d)
