"""`MHEFunction`: moving-horizon estimation generated as C++, solved as an OCP by the MPC's SQP and Riccati machinery.

The window of M measurement times is an OCP of M stages whose fixed initial state is the arrival cost's center and
whose inputs are the process noise (anvil/mhe.hpp says how); the arrival cost moves with the window by the smoothed
EKF update. Everything that changes between calls (measurements, applied inputs, parameters, the arrival cost) is a
call-time argument or the estimator's state, in Python and in the generated C++ alike.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from tinygrad import Tensor

from anvil.ad import jacobian
from anvil.codegen import Arg, FunctionBase, NumericalFunction
from anvil.codegen.base import check_identifier
from anvil.codegen.boundary import BoundaryCode
from anvil.codegen.forksafe import owned_lock
from anvil.codegen.names import DERIVED_ROOM
from anvil.codegen.precision import in_precision
from anvil.codegen.templated import TemplatedFunction, problem_key_of
from anvil.mpc.boundary import CALL_SCALARS, MHE_OPTIONS, estimator_boundary, outcome
from anvil.mpc.controller import MPCFunction
from anvil.mpc.costs import LeastSquares, checked_weight
from anvil.mpc.options import MPCOptions
from anvil.mpc.result import MHEEstimate
from anvil.sqp.boundary import SQP_SCALARS
from anvil.sqp.stats import Limits
from anvil.validation import check_bounds, float_array, require_cpu_float64, require_type

F64 = NDArray[np.float64]
Fn = NumericalFunction[..., Any]
Bounds = tuple[ArrayLike, ArrayLike]
#: The stage parameter's switches, before [u, y, p]: the stage holds its state (x_{k+1} = x_k + v), its input is the
#: arrival cost's deviation, its state is measured.
SWITCHES = ("hold", "arrival", "measured")


@dataclass(frozen=True)
class _EstimatorContext:
  """What the MHE templates need."""

  name: str
  ocp: str
  sqp: str
  nx: int
  nu: int
  ny: int
  np: int
  M: int
  nq: int
  nr: int
  n_tuning: int
  dynamics: str
  dynamics_p: bool
  state_jacobian: str
  measurement_jacobian: str
  measurement_p: bool
  evaluations: tuple[str, ...]
  x_prior: tuple[float, ...]
  arrival_weight: tuple[float, ...]
  Q: tuple[float, ...]
  Q_inverse: tuple[float, ...]
  R: tuple[float, ...]
  lbx: tuple[float, ...]
  ubx: tuple[float, ...]
  lbv: tuple[float, ...]
  ubv: tuple[float, ...]

  @property
  def boundary(self) -> BoundaryCode:
    """Its boundary structs' C++ (anvil/mpc/boundary.py)."""
    return estimator_boundary(self.name, self.sqp)


class MHEFunction(TemplatedFunction):
  """Moving-horizon estimation: over the last M measurement times, minimize

    |x_0 - x_bar|²_P + Σ_{j<M-1} |w_j|²_Q + Σ_{j<M} |y_j - h(x_j, p_j)|²_R
    s.t. x_{j+1} = F(x_j, u_j, p_j) + w_j, x_lo <= x_j <= x_hi, w_lo <= w_j <= w_hi

  and return the current state estimate x_hat = x_{M-1} (generated as C++, like `MPCFunction`). The window is an OCP
  of M stages on the MPC's multiple shooting, SQP and Riccati QP solver (the process noise its inputs).

  Arrival cost: the first window's is (x_prior, arrival_weight). After each call with a full window (M measurements)
  it moves to the next window's first time by the smoothed EKF update: center = this solution's x_1, weight P' =
  (A (P + CᵀRC)⁻¹ Aᵀ + Q⁻¹)⁻¹ with A = ∂F/∂x and C = ∂h/∂x at this solution's x_0 (the information of x_0 after its
  measurement, predicted one step). Each full-window call is therefore taken to follow the previous one by one
  measurement; a run's first calls pass the k < M measurements there are (their window starts at the prior's time).

  Args:
    name: a C++ identifier.
    dynamics: NumericalFunction (x, u) or (x, u, p) -> x_next (e.g. from `rk4`).
    measurement: NumericalFunction (x) or (x, p) -> y (ny,).
    horizon: M >= 2, the measurement times in a full window.
    process_noise_weight: Q, nx x nx symmetric positive definite (or its diagonal): the inverse covariance of w.
    measurement_weight: R, ny x ny (or its diagonal), positive definite: the inverse covariance of the noise on y.
    arrival_weight: P, nx x nx (or its diagonal), positive definite: the first window's arrival weight.
    x_bounds: (lower, upper) bounds on the states, each (nx,); ±inf: none.
    w_bounds: (lower, upper) bounds on the process noise, each (nx,).
    x_prior: the first window's arrival center (nx,) (default zeros).
    p: the default parameter (np,) of calls that pass none (dynamics or measurement taking p).
    options: MPCOptions of the OCP solver (full SQP; hessian "exact" or "gauss_newton"; qp; scalar).

  Calls are thread-safe (one at a time, as the MPC's).

  Example:
    >>> h = NumericalFunction("h", lambda x: x[0:2], (Arg(4),))
    >>> mhe = MHEFunction("est", F, h, 20, process_noise_weight=1e4, measurement_weight=1e3, arrival_weight=10.0)
    >>> est = mhe(y_window, u_window); est.x_hat
  """

  template = "mhe"
  header_runtime = ("mhe",)

  def __init__(
    self,
    name: str,
    dynamics: Fn,
    measurement: Fn,
    horizon: int,
    *,
    process_noise_weight: ArrayLike,
    measurement_weight: ArrayLike,
    arrival_weight: ArrayLike,
    x_bounds: Bounds | None = None,
    w_bounds: Bounds | None = None,
    x_prior: ArrayLike | None = None,
    p: ArrayLike | None = None,
    options: MPCOptions | None = None,
  ) -> None:
    self.name = check_identifier(name, "MHEFunction name", DERIVED_ROOM)
    where = f"MHEFunction({name})"
    require_type(where, "dynamics", dynamics, (NumericalFunction,), "a NumericalFunction (x, u[, p]) -> x_next")
    require_type(where, "measurement", measurement, (NumericalFunction,), "a NumericalFunction (x[, p]) -> y")
    for what, fn in (("dynamics", dynamics), ("measurement", measurement)):
      require_cpu_float64(where, what, fn, outputs=True)
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 2:
      raise ValueError(f"{where}: horizon must be an int >= 2 (measurement times in a window), got {horizon!r}")
    self.dynamics, self.measurement, self.M = dynamics, measurement, horizon
    self.nx, self.nu, self.ny, self.np = _sizes(where, dynamics, measurement)
    self.options = options or MPCOptions()
    if not isinstance(self.options, MPCOptions):
      raise TypeError(f"{where}: options must be MPCOptions, got {type(options).__name__}")
    if self.options.mode != "sqp":
      raise ValueError(f"{where}: options.mode must be 'sqp' (each window solved to convergence), got "
                       f"{self.options.mode!r}")  # fmt: skip
    self.Q = _definite(where, "process_noise_weight", process_noise_weight, self.nx)
    self.R = _definite(where, "measurement_weight", measurement_weight, self.ny)
    self.arrival_weight = _definite(where, "arrival_weight", arrival_weight, self.nx)
    self.x_bounds = _pair(where, "x_bounds", x_bounds, self.nx)
    self.w_bounds = _pair(where, "w_bounds", w_bounds, self.nx)
    self.x_prior = (
      np.zeros(self.nx) if x_prior is None else float_array(where, "x_prior", x_prior, (self.nx,), finite=True)
    )
    self.p = None if p is None else float_array(where, "p", p, (self.np,), finite=True)
    self._lock = owned_lock(self)

  # *** the OCP ***

  @property
  def nq(self) -> int:
    """Length of the OCP's stage parameter [hold, arrival, measured, u, y, p]."""
    return len(SWITCHES) + self.nu + self.ny + self.np

  @cached_property
  def ocp(self) -> MPCFunction:
    """The window's OCP (see the module's docstring): states x, inputs v (nx), stage parameter q."""
    nx, nu, ny, nq, name = self.nx, self.nu, self.ny, self.nq, self.name
    F, h = self.dynamics, self.measurement
    u_at, y_at, p_at = len(SWITCHES), len(SWITCHES) + nu, len(SWITCHES) + nu + ny

    def model(x: Tensor, q: Tensor) -> Tensor:
      return F.fn(x, q[u_at:y_at], q[p_at:]) if len(F.inputs) == 3 else F.fn(x, q[u_at:y_at])

    def error(x: Tensor, q: Tensor) -> Tensor:
      y = h.fn(x, q[p_at:]) if len(h.inputs) == 2 else h.fn(x)
      return q[2] * (q[y_at:p_at] - y)

    def step(x: Tensor, v: Tensor, q: Tensor) -> Tensor:
      return q[0] * x + (1 - q[0]) * model(x, q) + v

    def residual(x: Tensor, v: Tensor, q: Tensor) -> Tensor:
      return (q[1] * v).cat((1 - q[1]) * v, error(x, q))

    stage = (Arg(nx), Arg(nx), Arg(nq))
    weight = np.zeros((2 * nx + ny, 2 * nx + ny))
    weight[:nx, :nx], weight[nx : 2 * nx, nx : 2 * nx], weight[2 * nx :, 2 * nx :] = self.arrival_weight, self.Q, self.R
    pattern = weight != 0
    pattern[:nx, :nx] = True  # NOTE: the arrival weight's updates fill its block
    M, (x_lo, x_hi), (w_lo, w_hi) = self.M, self.x_bounds, self.w_bounds
    free = np.full(nx, np.inf)
    return MPCFunction(
      f"{name}_ocp", NumericalFunction(f"{name}_step", step, stage),
      LeastSquares(NumericalFunction(f"{name}_residual", residual, stage), weight, pattern),
      LeastSquares(NumericalFunction(f"{name}_last_residual", error, (Arg(nx), Arg(nq))), self.R), horizon=M,
      x_bounds=(np.vstack([x_lo] * (M + 1)), np.vstack([x_hi] * (M + 1))),
      u_bounds=(np.vstack([-free, *[w_lo] * (M - 1)]), np.vstack([free, *[w_hi] * (M - 1)])), options=self.options,
    )  # fmt: skip

  @cached_property
  def model(self) -> Fn:
    """F in the estimator's scalar type (the arrival update's step where the estimate is not finite)."""
    return in_precision(self.dynamics, self.options.scalar, f"{self.name}_model_f32")

  @cached_property
  def jacobians(self) -> tuple[Fn, Fn]:
    """A = ∂F/∂x (x, u[, p]) and C = ∂h/∂x (x[, p]), in the estimator's scalar type: the arrival cost's update."""
    scalar, name = self.options.scalar, self.name
    A, C = jacobian(self.dynamics, 0, name=f"{name}_A"), jacobian(self.measurement, 0, name=f"{name}_C")
    return in_precision(A, scalar, f"{name}_A_f32"), in_precision(C, scalar, f"{name}_C_f32")

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The OCP (and through it every generated function), the model and the Jacobians of the arrival update."""
    return (self.ocp, self.model, *self.jacobians)

  @cached_property
  def context(self) -> _EstimatorContext:
    """Sizes, names, weights and bounds."""
    A, C = self.jacobians
    nx, bounds = self.nx, self.ocp.defaults  # the OCP's own per-stage tables (its inputs v: v_0 free, then w)

    def values(a: ArrayLike) -> tuple[float, ...]:
      return tuple(float(v) for v in np.ravel(a))

    return _EstimatorContext(
      name=self.name, ocp=self.ocp.name, sqp=self.ocp.sqp.name, nx=nx, nu=self.nu, ny=self.ny, np=self.np, M=self.M,
      nq=self.nq, nr=2 * nx + self.ny, n_tuning=self.ocp.ocp.default_tuning.size, dynamics=self.model.name,
      dynamics_p=len(self.dynamics.inputs) == 3, state_jacobian=A.name, measurement_jacobian=C.name,
      measurement_p=len(self.measurement.inputs) == 2, evaluations=(self.model.name, A.name, C.name),
      x_prior=values(self.x_prior), arrival_weight=values(self.arrival_weight), Q=values(self.Q),
      Q_inverse=values(np.linalg.inv(self.Q)), R=values(self.R), lbx=values(bounds["lbx"]),
      ubx=values(bounds["ubx"]), lbv=values(bounds["lbu"]), ubv=values(bounds["ubu"]),
    )  # fmt: skip

  @cached_property
  def problem_key(self) -> str:
    """Cache key of the estimator from what its code is generated from (a warm process finds it by this alone, so it
    derives nothing): its window OCP's key (the step and residual functions traced from F and h, the options, the
    sizes), F's and h's keys (the arrival update's model and Jacobians), and the values its code holds (the prior, the
    weights and the bounds)."""
    values = (self.x_prior, self.arrival_weight, self.Q, self.R, *self.x_bounds, *self.w_bounds)
    parts = [self.name, self.ocp.problem_key, self.dynamics.key, self.measurement.key,
             *(np.asarray(v, dtype=np.float64).tobytes().hex() for v in values)]  # fmt: skip
    return problem_key_of("mhe", parts)

  # *** calls ***

  @cached_property
  def _entry(self) -> _Entry:
    return _Entry(self)

  def reset(self, x_prior: ArrayLike | None = None, arrival_weight: ArrayLike | None = None) -> None:
    """Restart from an arrival cost (center x_prior, weight arrival_weight; the build-time ones where None) and forget
    the previous window: the next call's window starts at the prior's time."""
    where = f"MHEFunction({self.name}).reset"
    center = self.x_prior if x_prior is None else float_array(where, "x_prior", x_prior, (self.nx,), finite=True)
    weight = self.arrival_weight if arrival_weight is None else _definite(where, "arrival_weight", arrival_weight,
                                                                          self.nx)  # fmt: skip
    with self._lock:
      e = self._entry
      e.reset(e.staged(center).ctypes.data, e.staged(weight).ctypes.data, e.ws)

  @property
  def arrival(self) -> tuple[F64, F64]:
    """The arrival cost the next call starts from: (center (nx,), weight (nx, nx))."""
    with self._lock:
      e = self._entry
      e.arrival(e.center.ctypes.data, e.weight.ctypes.data, e.ws)
      return e.center.astype(np.float64), e.weight.astype(np.float64)

  def __call__(
    self,
    y_window: ArrayLike,
    u_window: ArrayLike | None = None,
    p: ArrayLike | None = None,
    *,
    max_iter: int | None = None,
    tol: float | None = None,
    max_time: float | None = None,
  ) -> MHEEstimate:
    """Estimate from the last k measurements y_window (k, ny), 1 <= k <= M (oldest first), the k - 1 inputs applied
    between them u_window (k - 1, nu), and the parameter p ((np,) for every time, (k, np) per time; default the
    build-time p). A call with k = M moves the arrival cost one time on (see the class). max_iter, tol and max_time
    limit this call's SQP (as MPCFunction's)."""
    y, u, params = self._window(y_window, u_window, p)
    limits = self.ocp.stats_reader.limits(max_iter, tol, max_time)
    with self._lock:
      return self._solve(y, u, params, limits)

  def _window(self, y_window: ArrayLike, u_window: ArrayLike | None, p: ArrayLike | None) -> tuple[F64, F64, F64]:
    """The call's arrays, checked: y (k, ny), u (k - 1, nu), p (k, np)."""
    where = f"MHEFunction({self.name})"
    y = float_array(where, "y_window", y_window, None, finite=True)
    if y.ndim != 2 or y.shape[1] != self.ny or not 1 <= y.shape[0] <= self.M:
      raise ValueError(f"{where}: y_window must have shape (k, {self.ny}) with 1 <= k <= {self.M} (the last k "
                       f"measurements, oldest first), got {y.shape}")  # fmt: skip
    k = y.shape[0]
    if u_window is None and k > 1:
      raise ValueError(f"{where}: u_window is required: the {k - 1} inputs applied between the {k} measurements")
    u = np.zeros((0, self.nu)) if u_window is None else float_array(where, "u_window", u_window, None, finite=True)
    if u.shape != (k - 1, self.nu):
      raise ValueError(f"{where}: u_window must have shape ({k - 1}, {self.nu}) (the inputs applied between the {k} "
                       f"measurements), got {u.shape}")  # fmt: skip
    p = self.p if p is None else p
    if p is None:
      if self.np:
        raise ValueError(f"{where}: p is required: the model takes a parameter of length {self.np}")
      return y, u, np.zeros((k, 0))
    params = float_array(where, "p", p, None, finite=True)
    if params.shape == (self.np,):
      return y, u, np.broadcast_to(params, (k, self.np))
    if params.shape != (k, self.np):
      raise ValueError(f"{where}: p must have shape ({self.np},) or per measurement time ({k}, {self.np}), got "
                       f"{params.shape}")  # fmt: skip
    return y, u, params

  def _solve(self, y: F64, u: F64, p: F64, limits: Limits) -> MHEEstimate:
    """One call of the generated C++ on checked inputs (under the lock)."""
    e, k = self._entry, y.shape[0]
    e.y[:k], e.u[: k - 1], e.p[:k] = y, u, p
    options = MHE_OPTIONS.mirror(*limits)
    e.call(*e.inputs, k, ctypes.addressof(options), *e.outputs, *e.pointers, e.ws)
    history, ihistory = e.stats
    s, ocp = e.scalars, self.ocp
    _, status, stats = ocp.stats_reader.unpack(history, ihistory, e.sqp_scalars, ocp.defaults, ocp.labels)
    stats["restarted_cold"] = bool(s.restarted_cold)
    x, w = e.x[:k].astype(np.float64), e.w[: k - 1].astype(np.float64)
    return MHEEstimate(x_hat=x[-1].copy(), x=x, w=w, status=status, stats=stats, **outcome(s))


class _Entry:
  """The loaded estimator: its entry points, workspace and the buffers one call passes (allocated once)."""

  def __init__(self, mhe: MHEFunction) -> None:
    handle, pointer, M, nx = mhe.handle, ctypes.c_void_p, mhe.M, mhe.nx
    self.dtype = np.dtype(mhe.options.scalar)
    self.call = handle.entry("call", ctypes.c_int, pointer, pointer, pointer, ctypes.c_int, *[pointer] * 8)
    self.reset = handle.entry("reset", None, pointer, pointer, pointer)
    self.arrival = handle.entry("arrival", None, pointer, pointer, pointer)
    self.ws, self.stats = handle.pointer, mhe.ocp.stats_reader.buffers()
    self.y, self.u = np.zeros((M, mhe.ny), self.dtype), np.zeros((M, mhe.nu), self.dtype)
    self.p = np.zeros((M, max(mhe.np, 1)), self.dtype)[:, : mhe.np]
    self.x, self.w, self.scalars = np.zeros((M, nx), self.dtype), np.zeros((M, nx), self.dtype), CALL_SCALARS.mirror()
    self.center, self.weight = np.zeros(nx, self.dtype), np.zeros((nx, nx), self.dtype)
    self.inputs = (self.y.ctypes.data, self.u.ctypes.data, self.p.ctypes.data)
    self.outputs = (self.x.ctypes.data, self.w.ctypes.data)
    self.sqp_scalars = SQP_SCALARS.mirror()
    self.pointers = (*(a.ctypes.data for a in self.stats), ctypes.addressof(self.sqp_scalars),
                     ctypes.addressof(self.scalars))  # fmt: skip
    self.keep: F64 = np.zeros(0)

  def staged(self, values: F64) -> F64:
    """`values` in the estimator's type, kept alive until the next staging."""
    self.keep = np.ascontiguousarray(values, dtype=self.dtype)
    return self.keep


def _sizes(where: str, dynamics: Fn, measurement: Fn) -> tuple[int, int, int, int]:
  """(nx, nu, ny, np) from the model's functions, checked: F (x, u[, p]) -> x_next, h (x[, p]) -> y."""
  shapes = [a.shape for a in dynamics.inputs]
  if len(shapes) not in (2, 3) or any(len(s) != 1 for s in shapes) or dynamics.outputs[0].shape != shapes[0]:
    raise ValueError(f"{where}: dynamics must map vectors (x, u[, p]) to x_next shaped like x, got inputs {shapes} "
                     f"and outputs {[o.shape for o in dynamics.outputs]}")  # fmt: skip
  nx, nu, np_ = shapes[0][0], shapes[1][0], shapes[2][0] if len(shapes) == 3 else 0
  h_shapes = [a.shape for a in measurement.inputs]
  expected = [(nx,), (np_,)] if np_ else [(nx,)]
  if h_shapes not in (expected, [(nx,)]) or len(measurement.outputs) != 1 or len(measurement.outputs[0].shape) != 1:
    raise ValueError(f"{where}: measurement must map (x[, p]) shaped {expected} to one vector y, got inputs "
                     f"{h_shapes}")  # fmt: skip
  return nx, nu, measurement.outputs[0].size, np_


def _definite(where: str, what: str, weight: ArrayLike, n: int) -> F64:
  """An n x n symmetric positive definite weight (a scalar or a length-n vector: a diagonal), checked."""
  arr = np.asarray(weight, dtype=np.float64) if isinstance(weight, (int, float)) else weight
  if isinstance(arr, np.ndarray) and arr.ndim == 0:
    arr = np.full(n, float(arr))
  w = checked_weight(f"{where}: {what}", arr, n)
  eigenvalues = np.linalg.eigvalsh(w)
  if eigenvalues.min() <= 0:
    raise ValueError(f"{where}: {what} must be positive definite (an inverse covariance), got eigenvalues "
                     f"{eigenvalues}")  # fmt: skip
  return w


def _pair(where: str, what: str, bounds: Bounds | None, n: int) -> tuple[F64, F64]:
  """(lower, upper) bounds of length n (±inf: none), checked."""
  if bounds is None:
    return np.full(n, -np.inf), np.full(n, np.inf)
  if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
    raise TypeError(f"{where}: {what} must be a pair (lower, upper)")
  lo, hi = (np.broadcast_to(float_array(where, f"{what} {side}", v, None), (n,)).copy()
            for side, v in zip(("lower", "upper"), bounds, strict=True))  # fmt: skip
  check_bounds(where, what, lo, hi, lambda i: f"component {i[0]}")
  return lo, hi
