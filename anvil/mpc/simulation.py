"""`simulate`: run an MPC controller in closed loop with a plant, and collect the metrics a practitioner checks."""

from __future__ import annotations

import inspect
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from anvil.mpc.controller import MPCFunction
from anvil.mpc.costs import LeastSquares
from anvil.mpc.estimation import MHEFunction
from anvil.mpc.result import succeeded
from anvil.sqp import SQPStatus
from anvil.validation import float_array

F64 = NDArray[np.float64]
Plant = Callable[[F64, F64], Any]
Measure = Callable[[int, F64], Any]
Params = ArrayLike | Callable[[int], ArrayLike] | Callable[[int, NDArray[np.float64]], ArrayLike] | None


@dataclass(frozen=True)
class ClosedLoop:
  """A closed-loop run: trajectories and metrics.

  Attributes:
    x: states, (steps + 1, nx). u: applied inputs, (steps, nu).
    stage_costs: l(x_t, u_t) per step; cost: their sum (the closed-loop cost).
    solve_times: seconds per controller call (measured in the generated C++).
    iterations: SQP iterations per step. statuses: the controller's status per step.
    violations: per step, the largest violation of the controller's default path state bounds (those of stage 1)
      and input bounds (stage 0) by (x_{t+1}, u_t).
    x_bounds, u_bounds: those bounds (for plots).
    failure: why the run stopped early (the plant raised, or returned NaN/inf or a wrong shape), or None; the
      trajectories then hold the steps completed before it.
    failed_step: the step t at which the plant failed (x has t + 1 states), or None.
    real_time_iteration: the controller ran one SQP iteration per call ("max_iterations" is then its normal outcome).
    x_estimated: with an estimator, the state estimate each controller call used, (steps, nx); else None.
    estimation_times: with an estimator, seconds per estimator call (measured in the generated C++); else empty.
  """

  x: F64
  u: F64
  stage_costs: F64
  solve_times: F64
  iterations: NDArray[np.int64]
  statuses: tuple[SQPStatus, ...]
  violations: F64
  x_bounds: tuple[F64, F64] = field(repr=False)
  u_bounds: tuple[F64, F64] = field(repr=False)
  failure: str | None = None
  failed_step: int | None = None
  real_time_iteration: bool = False
  x_estimated: F64 | None = None
  estimation_times: F64 = field(default_factory=lambda: np.zeros(0))

  @property
  def cost(self) -> float:
    """Σ_t l(x_t, u_t) over the run."""
    return float(self.stage_costs.sum())

  @property
  def status_counts(self) -> dict[str, int]:
    """How many steps ended with each status (the statuses as plain strings)."""
    return {str(status): count for status, count in Counter(self.statuses).items()}

  @property
  def failures(self) -> int:
    """Steps whose controller call did not succeed (as `MPCSolution.success` tells)."""
    return sum(1 for s in self.statuses if not succeeded(s, self.real_time_iteration))

  @property
  def metrics(self) -> dict[str, Any]:
    """Closed-loop cost, violation and solve-time statistics (median/p95/max, ms), status counts."""
    ms = self.solve_times * 1e3
    return {
      "steps": len(self.statuses),
      "cost": self.cost,
      "max_violation": float(self.violations.max(initial=0.0)),
      "solve_ms_median": float(np.median(ms)) if ms.size else 0.0,
      "solve_ms_p95": float(np.percentile(ms, 95)) if ms.size else 0.0,
      "solve_ms_max": float(ms.max(initial=0.0)),
      "sqp_iterations_mean": float(self.iterations.mean()) if self.iterations.size else 0.0,
      "status_counts": self.status_counts,
    }

  def summary(self) -> str:
    """The metrics as a small table, and the failure that stopped the run early, if any."""
    lines = [f"{k:>20}: {v:.6g}" if isinstance(v, float) else f"{k:>20}: {v}" for k, v in self.metrics.items()]
    if self.failure is not None:
      lines.append(f"{'failed':>20}: stopped at step {self.failed_step}: {self.failure}")
    return "\n".join(lines)


def simulate(
  mpc: MPCFunction,
  plant: Plant,
  x0: ArrayLike,
  steps: int,
  p: Params = None,
  *,
  guess: tuple[ArrayLike, ArrayLike] | None = None,
  progress: bool | None = None,
  estimator: MHEFunction | None = None,
  measure: Measure | None = None,
  observe: Measure | None = None,
) -> ClosedLoop:
  """Run `steps` control steps: u_t = mpc(x_t, p_t).u0, x_{t+1} = plant(x_t, u_t); with an estimator, the controller
  sees the estimate instead of x_t: y_t = measure(t, x_t), x_hat_t = estimator(the last M measurements, the inputs
  between them).x_hat, u_t = mpc(x_hat_t, p_t).u0.

  Args:
    mpc: the controller (reset before the run; its warm start carries over between steps).
    plant: (x, u) -> x_next: a Python callable or a NumericalFunction (e.g. the model itself, or a mismatched one).
    x0: the initial state.
    steps: number of control steps.
    p: the controller's parameter: an array (the same every step), a callable t -> p_t (time-varying references) or
      (t, x) -> p_t (references that depend on the state: x the plant's state at step t, e.g. where a robot's feet
      stand).
    guess: optional (x (N + 1, nx), u (N, nu)) trajectory the first solve starts from (e.g. a swing-up's ramp);
      later steps warm-start from the shifted previous solution.
    progress: print a progress bar to stderr (default: for runs of more than 100 steps on a terminal).
    estimator: an MHEFunction (reset before the run: its first window starts at its prior) whose estimates the
      controller uses; its parameter is its default p.
    measure: (t, x_t) -> y_t, the measurement the estimator gets (e.g. its measurement function plus seeded noise);
      default the estimator's measurement function, noise-free.
    observe: (t, x_t) -> the state the controller sees without an estimator (e.g. x_t plus seeded measurement noise);
      default x_t.

  A controller failure does not stop the run: the step is counted under its status and the input held at the last
  usable value (zeros at the start) when the returned one is not finite. A plant failure (it raises, or returns
  NaN/inf or a wrong shape) stops it: the run up to that step is returned, with `failure` and `failed_step` set.
  """
  if not isinstance(mpc, MPCFunction):
    raise TypeError(f"simulate: mpc must be an MPCFunction, got {type(mpc).__name__}")
  if not callable(plant):
    raise TypeError(f"simulate: plant must be callable (x, u) -> x_next, got {type(plant).__name__}")
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
    raise ValueError(f"simulate: steps must be an int >= 0, got {steps!r}")
  if estimator is not None and not isinstance(estimator, MHEFunction):
    raise TypeError(f"simulate: estimator must be an MHEFunction, got {type(estimator).__name__}")
  if measure is not None and (estimator is None or not callable(measure)):
    raise TypeError("simulate: measure must be a callable (t, x) -> y, given with an estimator")
  if observe is not None and (estimator is not None or not callable(observe)):
    raise TypeError("simulate: observe must be a callable (t, x) -> the state the controller sees, given without an "
                    "estimator (which gets measure)")  # fmt: skip
  x = float_array("simulate", "x0", x0, (mpc.nx,), finite=True)
  show = progress if progress is not None else steps > 100 and sys.stderr.isatty()
  xs, costs, times, its, statuses = [x], [], [], [], []
  us: list[F64] = []
  failed: tuple[int, str] | tuple[None, None] = (None, None)
  u_last = np.zeros(mpc.nu)
  mpc.reset()
  if guess is not None:
    mpc.set_guess(*guess)
  observer = None if estimator is None else _Observer(estimator, measure)
  parameter = _parameter(p)
  start = time.perf_counter()
  for t in range(steps):
    p_t = parameter(t, x)
    x_seen = observer.estimate(t, x, us) if observer is not None else x if observe is None else _seen(observe, t, x)
    sol = mpc(x_seen, p_t)
    u = sol.u0.copy() if np.all(np.isfinite(sol.u0)) else u_last
    x_next, failure = _plant_step(plant, x, u)
    if failure is not None:
      failed = (t, failure)
      break
    costs.append(_stage_cost(mpc, x, u, p_t))
    x = x_next
    xs.append(x)
    us.append(u)
    times.append(sol.solve_time)
    its.append(sol.iterations)
    statuses.append(sol.status)
    u_last = u
    if show:
      _progress(mpc.name, t + 1, steps, time.perf_counter() - start)
  if show:
    sys.stderr.write("\n")
  X, U = np.array(xs), np.array(us).reshape(len(us), mpc.nu)
  bounds = mpc.defaults
  path = 1 if mpc.N > 1 else mpc.N  # the path bounds (row N holds the terminal ones)
  x_lo, x_hi, u_lo, u_hi = bounds["lbx"][path], bounds["ubx"][path], bounds["lbu"][0], bounds["ubu"][0]
  violation = np.maximum(np.maximum(x_lo - X[1:], X[1:] - x_hi).max(axis=1, initial=0.0),
                         np.maximum(u_lo - U, U - u_hi).max(axis=1, initial=0.0)) if us else np.zeros(0)  # fmt: skip
  estimates = None if observer is None else np.array(observer.estimates[: len(us)]).reshape(len(us), mpc.nx)
  return ClosedLoop(X, U, np.array(costs), np.array(times), np.array(its, dtype=np.int64), tuple(statuses),
                    np.maximum(violation, 0.0), (x_lo, x_hi), (u_lo, u_hi), failed[1], failed[0],
                    mpc.options.mode == "rti", estimates,
                    np.array([] if observer is None else observer.times[: len(us)]))  # fmt: skip


class _Observer:
  """The estimator's side of a closed loop: the measurements so far and the estimates made from them."""

  def __init__(self, estimator: MHEFunction, measure: Measure | None) -> None:
    self.estimator, self.measure = estimator, measure
    self.ys: list[F64] = []
    self.estimates: list[F64] = []
    self.times: list[float] = []
    estimator.reset()

  def estimate(self, t: int, x: F64, us: list[F64]) -> F64:
    """x_hat_t from the last M measurements (y_t = measure(t, x_t) appended) and the inputs applied between them."""
    mhe = self.estimator
    if self.measure is not None:
      y = float_array("simulate", "measure(t, x)", self.measure(t, x.copy()), (mhe.ny,), finite=True)
    else:
      y = np.asarray(mhe.measurement(*([x] if len(mhe.measurement.inputs) == 1 else [x, mhe.p])), dtype=np.float64)
    self.ys.append(y.reshape(mhe.ny))
    k = min(len(self.ys), mhe.M)
    inputs = np.array(us[len(us) - (k - 1) :]).reshape(k - 1, mhe.nu) if k > 1 else None
    est = mhe(np.array(self.ys[-k:]), inputs)
    self.estimates.append(est.x_hat)
    self.times.append(est.solve_time)
    return est.x_hat


def _seen(observe: Measure, t: int, x: F64) -> F64:
  """The state the controller sees at step t."""
  return float_array("simulate", "observe(t, x)", observe(t, x.copy()), x.shape, finite=True)


def _parameter(p: Params) -> Callable[[int, F64], Any]:
  """p as a function of the step and the plant's state: an array as it is, a callable of two positional parameters
  called with (t, x), any other callable with t."""
  if not callable(p):
    return lambda t, x: p
  try:
    kinds = [a.kind for a in inspect.signature(p).parameters.values()]
  except (TypeError, ValueError):  # NOTE: a callable without a signature (a builtin): a function of t
    kinds = []
  positional = sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)
  return (lambda t, x: p(t, x)) if positional >= 2 else (lambda t, x: p(t))  # type: ignore[call-arg]


def _plant_step(plant: Plant, x: F64, u: F64) -> tuple[F64, str | None]:
  """(x_next, None) from the plant, or (x, why) when it raised or returned something other than finite states."""
  try:
    value = plant(x.copy(), u.copy())
  except Exception as e:  # NOTE: whatever the plant raises ends the run, which is returned up to this step
    return x, f"the plant raised {type(e).__name__}: {e} (x = {x}, u = {u})"
  try:
    x_next = float_array("simulate", "x_next", value, None, finite=True)
  except (TypeError, ValueError) as e:
    return x, f"the plant returned {str(e).removeprefix('simulate: ')} (x = {x}, u = {u})"
  if x_next.size != x.size:
    return x, f"the plant returned x_next of shape {x_next.shape}, expected {x.size} values (x = {x}, u = {u})"
  return x_next.reshape(x.shape), None


def _stage_cost(mpc: MPCFunction, x: F64, u: F64, p: ArrayLike | None) -> float:
  """l(x_t, u_t[, p_t]) evaluated by the generated stage-cost function (p: stage 0's parameter, as the controller
  takes it: with scenarios, the root's)."""
  cost = mpc.stage_cost
  fn = cost.residual if isinstance(cost, LeastSquares) else cost
  args: list[Any] = [x, u]
  if len(fn.inputs) == 3:
    args.append(mpc.node_parameters(p)[0])
  value = np.asarray(fn(*args), dtype=np.float64)
  return float(value @ cost.weight @ value) if isinstance(cost, LeastSquares) else float(value.reshape(()))


def _progress(name: str, done: int, total: int, elapsed: float) -> None:
  width = 30
  filled = width * done // max(total, 1)
  rate = done / elapsed if elapsed > 0 else 0.0
  sys.stderr.write(f"\r{name} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {rate:.0f} steps/s")
  sys.stderr.flush()
