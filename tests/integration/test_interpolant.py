"""`anvil.interpolant`: values and first and second derivatives equal CasADi's `interpolant` (linear and bspline) on
the same data, at the knots, both ends and random points; its errors; run-time tables; float32."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor

import anvil as av
from anvil.ad import gradient, hessian, jacobian, jvp

ca = pytest.importorskip("casadi")

POINTS = 10_000


def _grids(kind: str, rng: np.random.Generator) -> list[np.ndarray]:
  """Grids of a case: evenly spaced or not, 1-D to 3-D."""
  sizes = {"1d": (37,), "1d_uneven": (41,), "2d": (9, 12), "2d_uneven": (8, 7), "3d": (6, 5, 7)}[kind]
  uneven = kind.endswith("uneven")
  steps = lambda n: np.cumsum(np.r_[0.0, rng.uniform(0.5, 1.5, n - 1)]) * 4 / n - 2  # spacings within 3x of each other
  return [steps(n) if uneven else np.linspace(-1.5, 2.5 + k, n) for k, n in enumerate(sizes)]


def _points(grids: list[np.ndarray], rng: np.random.Generator, count: int, outside: float = 0.0) -> np.ndarray:
  """count points: every node combination the budget allows (knots, both ends), the rest uniform within the grid
  (widened by `outside` on each side)."""
  d = len(grids)
  knots = np.stack(np.meshgrid(*grids, indexing="ij"), -1).reshape(-1, d)
  knots = knots[rng.permutation(len(knots))[: count // 2]]
  ends = np.array([[g[0] for g in grids], [g[-1] for g in grids]])
  lo, hi = np.array([g[0] - outside for g in grids]), np.array([g[-1] + outside for g in grids])
  random = rng.uniform(lo, hi, (count - len(knots) - 2, d))
  return np.concatenate([ends, knots, random])


def _casadi_values(values: np.ndarray, d: int) -> np.ndarray:
  """CasADi's flat value list: the first grid dimension fastest, the outputs of a node before the next node's."""
  axes = list(range(d - 1, -1, -1)) + ([d] if values.ndim > d else [])
  return np.transpose(values, axes).ravel()


def _casadi(grids: list[np.ndarray], values: np.ndarray, method: str) -> Any:
  """CasADi's value, gradient and Hessian of the table (the first output's), mapped over columns of points."""
  f = ca.interpolant("f", method, grids, _casadi_values(values, len(grids)))
  x = ca.MX.sym("x", len(grids))
  y = f(x)[0]
  return ca.Function("r", [x], [y, ca.gradient(y, x), ca.hessian(y, x)[0]]).map(POINTS)


def _anvil(table: av.Interpolant, d: int) -> tuple[Any, Any, Any]:
  """anvil's value, gradient and Hessian-vector products over POINTS points, through anvil.ad on the batched table."""
  total = av.NumericalFunction(f"{table.name}_sum", lambda X: _first(table(X)).sum(), (av.Arg((POINTS, d)),))
  values = av.NumericalFunction(f"{table.name}_batch", lambda X: _first(table(X)), (av.Arg((POINTS, d)),))
  return values, gradient(total), jvp(gradient(total))


def _multilinear_hessian(grids: list[np.ndarray], values: np.ndarray, X: np.ndarray) -> np.ndarray:
  """The exact Hessian of multilinear interpolation (numpy), (d, points, d) as CasADi's map lays it out: in each
  cell, ∂²f/∂x_a∂x_b = Σ_corners v · w_a' w_b' Π_others w, its diagonal 0."""
  d = len(grids)
  cells = [np.clip(np.searchsorted(g, X[:, k], side="right") - 1, 0, len(g) - 2) for k, g in enumerate(grids)]
  h = [g[c + 1] - g[c] for g, c in zip(grids, cells, strict=True)]
  t = [(X[:, k] - g[c]) / hk for k, (g, c, hk) in enumerate(zip(grids, cells, h, strict=True))]
  out = np.zeros((d, len(X), d))
  for a in range(d):
    for b in range(d):
      if a == b:
        continue
      for corner in np.ndindex(*(2,) * d):
        factor = values[tuple(c + o for c, o in zip(cells, corner, strict=True))]
        for k, o in enumerate(corner):
          factor = factor * ((1 if o else -1) / h[k] if k in (a, b) else (t[k] if o else 1 - t[k]))
        out[a, :, b] += factor
  return out


def _first(y: Tensor) -> Tensor:
  return y if y.ndim == 1 else y[:, 0]


@pytest.mark.parametrize("method", ["linear", "bspline"])
@pytest.mark.parametrize("kind", ["1d", "1d_uneven", "2d", "2d_uneven", "3d"])
def test_equals_casadi(method: str, kind: str) -> None:
  rng = np.random.default_rng(len(kind) + 7 * len(method))
  grids = _grids(kind, rng)
  d = len(grids)
  values = rng.standard_normal(tuple(len(g) for g in grids) + ((2,) if kind == "2d" else ()))
  table = av.interpolant(f"t_{method}_{kind}", grids if d > 1 else grids[0], values, method=method)
  X = _points(grids, rng, POINTS, outside=0.5 if method == "linear" else 0.0)
  y, g, h = (np.array(r) for r in _casadi(grids, values, method)(X.T))
  value_fn, gradient_fn, hvp_fn = _anvil(table, d)
  scale = lambda a: 1e-12 * max(1.0, float(np.max(np.abs(a))))
  np.testing.assert_allclose(value_fn(X), y.ravel(), rtol=0, atol=scale(y))
  np.testing.assert_allclose(gradient_fn(X), g.T, rtol=0, atol=scale(g))
  hess = h.reshape(d, POINTS, d)  # NOTE: CasADi's map puts the d x d Hessians side by side
  if method == "linear":  # NOTE: CasADi's linear Hessian is 0: it ignores a multilinear cell's mixed terms
    np.testing.assert_array_equal(hess, 0.0)
    hess = _multilinear_hessian(grids, values[..., 0] if values.ndim > d else values, X)
  for k in range(d):
    seed = np.zeros((POINTS, d))
    seed[:, k] = 1.0
    np.testing.assert_allclose(hvp_fn(X, seed), hess[:, :, k].T, rtol=0, atol=scale(h))


def test_linear_knots_take_the_right_interval_as_casadi() -> None:
  grid = np.array([0.0, 1.0, 3.0, 4.0])
  table = av.interpolant("knots", grid, np.array([0.0, 1.0, 5.0, 4.0]))
  slope = jacobian(table)
  assert [float(slope(np.array([x]))[0, 0]) for x in grid] == [1.0, 2.0, -1.0, -1.0]
  assert float(hessian(table)(np.array([0.5]))[0, 0]) == 0.0


@pytest.mark.parametrize("extrapolation", ["linear", "constant", "polynomial", "zero"])
def test_extrapolation(extrapolation: str) -> None:
  grid = np.linspace(0.0, 3.0, 7)
  values = np.cos(grid)
  table = av.interpolant(f"ex_{extrapolation}", grid, values, method="cubic", extrapolation=extrapolation)
  spline = __import__("scipy").interpolate.make_interp_spline(grid, values, k=3)
  for x, end in ((-0.7, 0.0), (4.1, 3.0)):
    expected = {
      "linear": spline(end) + spline(end, 1) * (x - end),
      "constant": spline(end),
      "polynomial": spline(x),
      "zero": 0.0,
    }[extrapolation]
    assert table(x) == pytest.approx(expected, abs=1e-12)
  assert table(1.3) == pytest.approx(spline(1.3), abs=1e-13)


def test_run_time_table_needs_no_rebuild() -> None:
  grid = np.linspace(0.0, 10.0, 201)
  first, second = np.sin(grid), np.exp(-grid) * grid
  for method in ("linear", "cubic"):
    table = av.interpolant(f"rt_{method}", grid, first, method=method, values_as_input=True)
    for values in (first, second):
      data = table.coefficients(values)
      fixed = av.interpolant(f"fx_{method}", grid, values, method=method)
      for x in (0.0, 3.33, 7.5, 10.0):
        assert table(x, data) == pytest.approx(fixed(x), abs=1e-13)
    assert "rt_" in table.name and table.library is not None


def test_float32() -> None:
  grid = np.linspace(0.0, 1.0, 50)
  values = grid**3
  fn = av.NumericalFunction(
    "t32", lambda x: av.interpolant("t32_table", grid, values, method="cubic")(x), (av.Arg(4, dtype=av.dtypes.float32),)
  )
  x = np.array([0.0, 0.31, 0.77, 1.0], np.float32)
  out = fn(x)
  assert out.dtype == np.float32
  np.testing.assert_allclose(out, x.astype(np.float64) ** 3, atol=1e-6)


@pytest.mark.parametrize(
  ("grid", "values", "kwargs", "message"),
  [
    ([0.0, 2.0, 1.0], [1.0, 2.0, 3.0], {}, r"grid\[0\] must be strictly increasing"),
    ([0.0, 1.0, 2.0], [1.0, 2.0], {}, r"values must have shape \(3,\)"),
    ([0.0, 1.0, 2.0], [1.0, np.nan, 3.0], {}, "NaN or inf"),
    ([0.0, 1.0, np.inf], [1.0, 2.0, 3.0], {}, "NaN or inf"),
    ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], {"method": "cubic"}, "at least 4"),
    ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], {"method": "spline"}, "method must be one of"),
    ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], {"extrapolation": "clamp"}, "extrapolation must be one of"),
  ],
)
def test_bad_tables_name_the_table(grid: Any, values: Any, kwargs: dict[str, Any], message: str) -> None:
  with pytest.raises(ValueError, match=f"track: .*{message}"):
    av.interpolant("track", grid, values, **kwargs)


def test_outside_the_grid_under_error() -> None:
  table = av.interpolant("strict", [0.0, 1.0, 2.0], [0.0, 1.0, 4.0], extrapolation="error")
  assert table(1.5) == pytest.approx(2.5)
  with pytest.raises(ValueError, match=r"strict: x\[0\] = 2.5 is outside the grid \[0.0, 2.0\]"):
    table(2.5)
  inside = av.NumericalFunction("strict_in", lambda x: table(x), (av.Arg(2),))
  out = inside(np.array([0.5, 3.0]))
  assert out[0] == pytest.approx(0.5) and np.isnan(out[1])


def test_wrong_point_shapes() -> None:
  table = av.interpolant("plane", [[0.0, 1.0], [0.0, 1.0, 2.0]], np.zeros((2, 3)))
  with pytest.raises(ValueError, match=r"plane: x must have shape \(2,\)"):
    table(np.zeros(3))
  with pytest.raises(ValueError, match=r"plane: x must have shape \(\.\.\., 2\)"):
    _ = av.NumericalFunction("plane_in", lambda x: table(x), (av.Arg(3),)).traced


@pytest.mark.parametrize("method", ["linear", "cubic"])
def test_derivative_in_run_time_data(method: str) -> None:
  """The table is linear in its data: ∂value/∂data is the weight of each coefficient, by anvil.ad as by numpy."""
  grid = [np.linspace(0.0, 1.0, 6), np.array([0.0, 0.3, 1.0, 1.2, 2.0])]
  values = np.random.default_rng(3).standard_normal((6, 5))
  table = av.interpolant(f"dd_{method}", grid, values, method=method, values_as_input=True)
  data = table.coefficients(values)
  x = np.array([0.37, 1.05])
  by_ad = jacobian(table, 1)(x, data).reshape(data.shape)
  by_basis = np.zeros(data.shape)
  for k in np.ndindex(*data.shape):
    unit = np.zeros(data.shape)
    unit[k] = 1.0
    by_basis[k] = table(x, unit)  # NOTE: linear in the data: the value at a unit coefficient is its weight
  np.testing.assert_allclose(by_ad, by_basis, atol=1e-13)
  assert np.count_nonzero(by_ad) == (2 if method == "linear" else 4) ** 2


def test_clustered_nodes_take_the_binary_search() -> None:
  """Nodes clustered 10^6 times closer in one place than elsewhere: the bucket scan would need too many steps, so the
  interval is found by bisection; values equal numpy's interpolation everywhere, knots included."""
  grid = np.r_[np.linspace(0.0, 1.0, 30), 1.0 + np.geomspace(1e-6, 1e-3, 20), np.linspace(1.01, 5.0, 30)]
  values = np.cos(3 * grid)
  table = av.interpolant("clustered", grid, values)
  assert table.axes[0].buckets is None
  points = np.r_[grid, np.random.default_rng(5).uniform(grid[0], grid[-1], 2000)]
  batch = av.NumericalFunction("clustered_batch", lambda x: table(x), (av.Arg(len(points)),))
  np.testing.assert_allclose(batch(points), np.interp(points, grid, values), rtol=0, atol=1e-14)


def test_lookups_leave_scalar_code_to_tinygrads_kernels() -> None:
  """A table read at a computed index, inside a function of many small tensors (the scalar route's kind) and its
  derivatives on the scalar expressions: built through tinygrad's kernels, which read the one entry (scalar code would
  sum the whole table per lookup), with a 20000-node table; derivatives equal finite differences."""
  from anvil.ad import spjacobian
  from anvil.codegen.scalar import Unsupported, lower

  grid = np.linspace(0.0, 20.0, 20_000)
  table = av.interpolant("big", grid, np.sin(grid), method="cubic")

  def rollout(x: Tensor) -> Tensor:
    states = []
    for _ in range(8):
      x = Tensor.stack(x[0] + 0.05 * x[1], x[1] + 0.05 * table(x[0]))
      states.append(x)
    return Tensor.cat(*states)

  fn = av.NumericalFunction("big_rollout", rollout, (av.Arg(2),))
  with pytest.raises(Unsupported, match="lookup at a computed index"):
    lower(fn.traced)
  jac = spjacobian(fn, scalar=True)
  x, h = np.array([3.0, 0.5]), 1e-6
  fd = np.stack([(fn(x + h * e) - fn(x - h * e)) / (2 * h) for e in np.eye(2)], 1)
  np.testing.assert_allclose(jac(x).toarray(), fd, atol=1e-7)


def test_sqp_on_a_table_equals_scipy() -> None:
  """min (x0 - 2)² + (x1 - 1)² subject to a 2-D cubic table ≤ 0.8 (active: 1.45 at the unconstrained minimum):
  anvil's SQP and scipy's SLSQP on scipy's spline of the same data agree."""
  from scipy.interpolate import NdBSpline, make_interp_spline
  from scipy.optimize import minimize

  from anvil.sqp import SQPFunction

  grid = [np.linspace(0.0, 3.0, 9), np.array([0.0, 0.4, 1.0, 1.5, 2.2, 3.0])]
  values = np.add.outer(np.sin(grid[0]), np.cos(grid[1]))
  table = av.interpolant("sqp_table", grid, values, method="cubic")
  cost = av.NumericalFunction("sqp_f", lambda x, p: (x[0] - 2) ** 2 + (x[1] - 1) ** 2, (av.Arg(2), av.Arg(0)))
  constraint = av.NumericalFunction("sqp_g", lambda x, p: table(x).reshape(1), (av.Arg(2), av.Arg(0)))
  result = SQPFunction("sqp_on_table", cost, constraint)(np.array([1.0, 1.0]), np.zeros(0), np.zeros(2),
                                                          np.full(2, 3.0), [-np.inf], [0.8])  # fmt: skip
  along0 = make_interp_spline(grid[0], values, k=3)  # the not-a-knot cubic along each axis, in turn
  along1 = make_interp_spline(grid[1], along0.c.T, k=3)
  spline = NdBSpline((along0.t, along1.t), along1.c.T, 3)
  reference = minimize(lambda x: (x[0] - 2) ** 2 + (x[1] - 1) ** 2, np.array([1.0, 1.0]), method="SLSQP",
                       bounds=[(0, 3), (0, 3)], constraints={"type": "ineq", "fun": lambda x: 0.8 - spline(x)},
                       options={"ftol": 1e-14})  # fmt: skip
  assert result.status == "converged"
  np.testing.assert_allclose(result.x, reference.x, atol=1e-5)  # NOTE: SLSQP stops within a few 1e-6
  # the KKT conditions on scipy's spline: on the constraint, the cost's gradient against the constraint's
  assert spline(result.x) == pytest.approx(0.8, abs=1e-10)
  normal = np.array([spline(result.x, nu=(1, 0)), spline(result.x, nu=(0, 1))])
  pull = 2 * (result.x - np.array([2.0, 1.0]))
  assert abs(pull[0] * normal[1] - pull[1] * normal[0]) < 1e-7 * np.linalg.norm(pull) * np.linalg.norm(normal)


def test_mhe_inverts_a_calibration_table() -> None:
  """A cart measured through a sensor's nonlinear calibration table (position -> reading): noise-free readings, the
  moving-horizon estimate is the true state."""
  from anvil.mpc import MHEFunction, rk4

  reading = np.linspace(-2.0, 2.0, 41)
  calibration = av.interpolant("calib", reading, np.tanh(reading) + 0.3 * reading, method="cubic")
  dynamics = rk4("calib_F", lambda x, u: Tensor.stack(x[1], u[0] - 0.2 * x[1]), 0.05, nx=2, nu=1)
  measurement = av.NumericalFunction("calib_h", lambda x: calibration(x[0]).reshape(1), (av.Arg(2),))
  mhe = MHEFunction("calib_mhe", dynamics, measurement, 10, process_noise_weight=1e8, measurement_weight=1e6,
                    arrival_weight=1e-6)  # fmt: skip
  x, u = np.array([-0.5, 0.8]), 0.3 * np.ones(1)
  ys, us = [], []
  for _ in range(25):
    ys.append(measurement(x))
    us.append(u)
    x = dynamics(x, u)
  estimate = mhe(np.array(ys[-10:]), np.array(us[-10:-1]))
  truth = np.array([-0.5, 0.8])
  for _ in range(24):
    truth = dynamics(truth, u)
  np.testing.assert_allclose(estimate.x_hat, truth, atol=1e-4)


def test_the_guide_example() -> None:
  """The lookup-table guide's example runs and its numbers are the spline's."""
  from pathlib import Path

  from scipy.interpolate import make_interp_spline

  from tests.integration.docs_runner import python_blocks

  page = Path(__file__).resolve().parents[2] / "docs" / "guide" / "tables.md"
  line, code, _ = python_blocks(page.read_text())[0]
  scope: dict[str, Any] = {}
  exec(compile("\n" * (line - 1) + code, str(page), "exec"), scope)
  spline = make_interp_spline(scope["s"], np.sin(scope["s"] / 5), k=3)
  assert float(scope["value"]) == pytest.approx(float(spline(12.5)), abs=1e-13)
  assert float(scope["slope"][0, 0]) == pytest.approx(float(spline(12.5, 1)), abs=1e-12)
  x, u = np.array([12.5, 0.5]), np.array([0.1])
  expected = x + 0.01 * np.array([0.5, 0.1 - float(spline(12.5)) * 0.25])
  np.testing.assert_allclose(scope["F"](x, u), expected, atol=1e-14)
  assert scope["torque"].shape == () and scope["current"].shape == ()
