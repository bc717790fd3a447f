"""`MPCFunction`: a nonlinear MPC controller generated as C++, callable from Python and shippable as a module."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import osqp
from numpy.typing import ArrayLike, NDArray

from anvil.codegen import FunctionBase
from anvil.codegen.base import check_identifier
from anvil.codegen.boundary import BoundaryCode
from anvil.codegen.forksafe import owned_lock
from anvil.codegen.jit import sources_fingerprint
from anvil.codegen.names import DERIVED_ROOM
from anvil.codegen.native import NativeHandle
from anvil.codegen.precision import cpp_real
from anvil.codegen.templated import TemplatedFunction, problem_key_of
from anvil.mpc.boundary import CALL_BOUNDS, CALL_OPTIONS, CALL_SCALARS, controller_boundary, outcome
from anvil.mpc.costs import LeastSquares
from anvil.mpc.implicit import ImplicitIntegrator
from anvil.mpc.integrators import ExplicitIntegrator
from anvil.mpc.labels import OCPLabels
from anvil.mpc.options import MPCOptions
from anvil.mpc.rate import InputRate
from anvil.mpc.result import MPCSolution
from anvil.mpc.scaling import AutoScaling, Scaling
from anvil.mpc.scenarios import Scenarios
from anvil.mpc.sensitivity import MPCSensitivityFunction
from anvil.mpc.soft import SOFT_SIDES, Soft
from anvil.mpc.transcription import Cost, Fn, Transcription
from anvil.mpc.tuning import tuning_vector
from anvil.sqp import Sensitivity, SQPFunction, SQPStatus
from anvil.sqp.boundary import SQP_SCALARS
from anvil.sqp.result import SUCCESS
from anvil.sqp.stats import Limits, StatsReader
from anvil.validation import check_bounds, float_array

Bounds = tuple[ArrayLike, ArrayLike]
F64 = NDArray[np.float64]


@dataclass(frozen=True)
class _ControllerContext:
  """What the MPC templates need."""

  name: str
  sqp: str
  nx: int
  nu: int
  N: int
  np: int
  param_rows: int
  nh: int
  nhN: int
  ns: int
  nw: int
  ng: int
  rti: bool
  warm_start: bool
  tables: tuple[tuple[str, tuple[int, ...]], ...]
  scales: tuple[tuple[str, tuple[float, ...]], ...]  # a scaled NLP's w_scale and g_scale (anvil.mpc.scaling)
  real: str
  tuning: tuple[float, ...]
  tuning_doc: str
  nx_model: int
  nh_model: int
  rate: bool
  rate_bounded: bool
  rate_lb: tuple[float, ...]
  rate_ub: tuple[float, ...]

  @property
  def boundary(self) -> BoundaryCode:
    """Its boundary structs' C++ (anvil/mpc/boundary.py)."""
    return controller_boundary(self.name, self.sqp)


class MPCFunction(TemplatedFunction):
  """Nonlinear MPC: minimize Σ_k l(x_k, u_k, p_k) + l_N(x_N, p_N) over a horizon of N stages subject to the
  dynamics x_{k+1} = F(x_k, u_k, p_k), x_0 = the measured state, bounds on states and inputs, and path and terminal
  constraints; transcribed by multiple shooting into an `SQPFunction` (batched over stages).

  Everything that changes between control steps (x0, parameters, per-stage references, every bound) is a call-time
  argument of the Python controller and of the generated C++ `call()`; the previous solution, shifted by one stage,
  warm-starts the next call, and the previous call's last QP (shifted alike) its first QP.

  Args:
    name: a C++ identifier.
    dynamics: NumericalFunction (x, u) or (x, u, p) -> x_next (e.g. from `rk4`).
    stage_cost: NumericalFunction (x, u[, p]) -> scalar, or `LeastSquares`.
    terminal_cost: NumericalFunction (x[, p]) -> scalar, `LeastSquares`, or None.
    horizon: N >= 1.
    x_bounds: default (lower, upper) state bounds, each (nx,) or per stage (N + 1, nx) (row 0 is unused: x_0 is
      fixed; row N bounds x_N unless x_terminal_bounds is given). ±inf: no bound.
    u_bounds: default input bounds, (nu,) or (N, nu).
    constraints: optional path constraints h(x, u[, p]) -> (nh,), kept within constraint_bounds at stages 0..N-1
      (or the pair (h, (lower, upper))).
    constraint_bounds: default (lower, upper), (nh,) or (N, nh).
    terminal_constraints: optional h_N(x[, p]) -> (nhN,) (or (h_N, (lower, upper))); terminal_constraint_bounds: its
      (lower, upper).
    x_terminal_bounds: default bounds on x_N, (nx,).
    soft: bounds to soften, {"x" | "u" | "constraints" | "x_terminal" | "terminal_constraints": Soft(...)}; "x"
      softens x_1 .. x_N (x_N's bounds are x_bounds' last row), unless x_N has bounds of its own (x_terminal_bounds),
      which only "x_terminal" softens.
    options: MPCOptions.
    u_rate_bounds: bounds (lower, upper) on u_k - u_{k-1}, (nu,) each (`anvil.mpc.rate`).
    u_rate_weight: W of the input-rate penalty (u_k - u_{k-1})' W (u_k - u_{k-1}), (nu,) or (nu, nu).
    scenarios: multi-stage robust MPC (`Scenarios`): the uncertain components of p take each of the scenarios'
      values, and the OCP is solved over the scenario tree they span (`anvil.mpc.scenarios`): one state and input
      trajectory per branch, the branches sharing the first `robust_horizon` stages' inputs as they share the values
      met so far, the cost their weighted sum. Bounds, p and guesses stay per stage (a tree's nodes take their
      stage's); `MPCSolution.x` and `u` are the first branch's, `x_scenarios` and `u_scenarios` every branch's. Needs
      hessian="exact"; the C++ module's arrays are per node of the tree (`N` its nodes: its bounds and p from
      `node_bounds`).
    scaling: the NLP scaled by these factors (`Scaling`: of states, inputs and constraint rows), by factors chosen
      from the bounds and a first linearization (`AutoScaling`; "auto": at its default point), invisible in results:
      bounds, x0, guesses and plans stay in the model's units. Needs hessian="exact"; generates no sensitivities.

  Calls are thread-safe: the controller stages a call's inputs and outputs in buffers it allocated once, so a call,
  `prepare()`, `reset()` and `set_guess()` each hold this controller's lock from staging to unpacking (calls from
  several threads run one at a time; each warm-starts from whichever call ran before it).

  Example:
    >>> F = rk4("F", ode, 0.05, nx=4, nu=1)
    >>> mpc = MPCFunction("cartpole", F, l, lN, horizon=30, u_bounds=([-20.0], [20.0]))
    >>> sol = mpc(np.array([0.5, 0.3, 0.0, 0.0])); sol.u0
  """

  template = "mpc"
  header_runtime = ("mpc", "input_rate")

  def __init__(
    self,
    name: str,
    dynamics: Fn | ImplicitIntegrator,
    stage_cost: Cost,
    terminal_cost: Cost | None = None,
    horizon: int = 20,
    x_bounds: Bounds | None = None,
    u_bounds: Bounds | None = None,
    constraints: Fn | None = None,
    constraint_bounds: Bounds | None = None,
    terminal_constraints: Fn | None = None,
    terminal_constraint_bounds: Bounds | None = None,
    x_terminal_bounds: Bounds | None = None,
    soft: Mapping[str, Soft] | None = None,
    options: MPCOptions | None = None,
    u_rate_bounds: Bounds | None = None,
    u_rate_weight: ArrayLike | None = None,
    scenarios: Scenarios | None = None,
    scaling: Scaling | AutoScaling | str | None = None,
  ) -> None:
    self.name = check_identifier(name, "MPCFunction name", DERIVED_ROOM + len("_sqp"))  # NOTE: its SQP is <name>_sqp
    if options is not None and not isinstance(options, MPCOptions):
      raise TypeError(f"{name}: options must be MPCOptions, got {type(options).__name__}")
    self.options = options or MPCOptions()
    constraints, constraint_bounds = _with_bounds(name, "constraints", constraints, constraint_bounds)
    terminal_constraints, terminal_constraint_bounds = _with_bounds(
      name, "terminal_constraints", terminal_constraints, terminal_constraint_bounds
    )
    self.ocp = Transcription(
      name,
      dynamics,
      stage_cost,
      terminal_cost,
      horizon,
      constraints,
      terminal_constraints,
      _soft_with_terminal(soft, x_terminal_bounds),
      scalar=self.options.scalar,
      u_rate=(u_rate_bounds, u_rate_weight),
      scenarios=scenarios,
    )
    if scenarios is not None and self.options.hessian != "exact":
      raise ValueError(f"{name}: scenarios need MPCOptions(hessian=\"exact\") (the tree's weighted cost is derived "
                       "with the rest of the NLP)")  # fmt: skip
    if isinstance(dynamics, ImplicitIntegrator) and (not self.options.integrator_derivatives or self.nu == 0):
      raise ValueError(f"{name}: dynamics made by irk (an implicit step: Newton's method, no traced graph) need "
                       "MPCOptions(integrator_derivatives=True) and at least one input")  # fmt: skip
    if constraints is None and constraint_bounds is not None:
      raise ValueError(f"{name}: constraint_bounds given without constraints")
    if terminal_constraints is None and terminal_constraint_bounds is not None:
      raise ValueError(f"{name}: terminal_constraint_bounds given without terminal_constraints")
    self.defaults = self._bounds(x_bounds, u_bounds, constraint_bounds, x_terminal_bounds, terminal_constraint_bounds)
    self._scale(scaling)
    self.ocp.check_soft()
    self._lock = owned_lock(self)
    self._after = 0.0  # NOTE: seconds a call spends in Python after its C++ (a decaying maximum), for max_time

  def _scale(self, scaling: Scaling | AutoScaling | str | None) -> None:
    """The Transcription's scale factors from `scaling` (checked; "auto": AutoScaling())."""
    if scaling is None:
      return
    if isinstance(scaling, str) and scaling == "auto":
      scaling = AutoScaling()
    if isinstance(scaling, AutoScaling):
      scaling = self._auto_scaling(scaling)
    if not isinstance(scaling, Scaling):
      raise TypeError(f'{self.name}: scaling must be a Scaling, an AutoScaling or "auto", got {scaling!r}')
    ocp = self.ocp
    sizes = {"x": ocp.nx_model, "u": ocp.nu, "constraints": ocp.nh_model, "terminal_constraints": ocp.nhN}
    ocp.scales = scaling.factors(self.name, sizes)
    if ocp.scaled and self.options.hessian != "exact":
      raise ValueError(f"{self.name}: scaling needs MPCOptions(hessian=\"exact\") (the scaled cost is derived with the "
                       "rest of the NLP)")  # fmt: skip

  def _auto_scaling(self, auto: AutoScaling) -> Scaling:
    """AutoScaling's factors, from a first linearization at its point (p by default: 0, and over a scenario tree
    the first scenario's values)."""
    ocp = self.ocp
    nominal = np.zeros(ocp.np)
    if ocp.scenarios is not None:
      nominal[list(ocp.uncertain)] = np.asarray(ocp.scenarios.values)[0]
    point = auto.point(self.name, self.defaults, (self.nx, self.nu, ocp.np), nominal)
    return auto.factors_at(self.name, self.defaults, point, ocp.linearization(*point))

  # *** sizes ***

  @property
  def nx(self) -> int:
    """States (the model's: the previous inputs an input rate adds are the NLP's alone)."""
    return self.ocp.nx_model

  @property
  def nu(self) -> int:
    """Inputs."""
    return self.ocp.nu

  @property
  def N(self) -> int:
    """Horizon."""
    return self.ocp.horizon

  @property
  def np(self) -> int:
    """Parameters per stage."""
    return self.ocp.np

  @property
  def stage_cost(self) -> Cost:
    """The stage cost l(x, u[, p])."""
    return self.ocp.stage_cost

  # *** the NLP and its solver ***

  @cached_property
  def sensitivity_function(self) -> MPCSensitivityFunction:
    """∂u0/∂x0 and ∂u0/∂p at the last solution, generated as C++ to put in a module beside the controller
    (`MPCSensitivityFunction`; Python has them as MPCSolution.du0_dx0 and du0_dp). Not over a scenario tree."""
    if self.ocp.tree.branched or self.ocp.scaled:
      raise ValueError(f"{self.name}: the sensitivities of a scenario-tree MPC (scenarios=...) or a scaled one "
                       "(scaling=...) are not generated")  # fmt: skip
    return MPCSensitivityFunction(self)

  @cached_property
  def sqp(self) -> SQPFunction:
    """The SQP solver of the multiple-shooting NLP (its QPs laid out by stage, for the Riccati QP solver)."""
    cost, constraints = self.ocp.functions()
    name, gauss_newton = f"{self.name}_sqp", self.options.hessian == "gauss_newton"
    rti, derivatives = self.options.mode == "rti", self.options.integrator_derivatives
    stagewise = self.ocp.stagewise(name, not gauss_newton, keep_steps=rti) if derivatives else None
    code, jacobian, exact = stagewise or (None, None, None)
    hessian = self.ocp.gauss_newton_hessian() if gauss_newton else exact
    # NOTE: the Gauss-Newton Hessian, 2 sigma J'WJ + diag(2 l2), is PSD (LeastSquares checks W, Soft checks l2)
    # NOTE: with the dynamics stage by stage, the cost's gradient is too (its traced version, batched kernels over the
    # horizon, took 13 of a robot MPC's 32 s of cold build)
    grad = self.ocp.stage_cost_gradient() if stagewise and self.ocp.cost_by_stage else None
    return SQPFunction(name, cost, constraints, self.options.sqp_options, hessian=hessian, jacobian=jacobian,
                       stages=self.ocp.stage_layout(), convex_hessian=gauss_newton, constraints_code=code,
                       gradient=grad)  # fmt: skip

  @cached_property
  def stats_reader(self) -> StatsReader:
    """Checks a call's limits and reads the Stats it filled: from the options and sizes, so a controller loaded from
    the cache builds no derivatives (its SQP solver's functions are named only where one returned NaN/inf)."""
    return StatsReader(f"{self.name}_sqp", self.options.sqp_options, self.ocp.ng, True,
                       lambda which: self.sqp.function_name(which))  # fmt: skip

  @property
  def model_functions(self) -> tuple[FunctionBase, Fn]:
    """The dynamics and the stage cost (its residual for a LeastSquares cost): emitted in the module too, for robot
    code (and the C++ harness) that simulates or scores with the same model."""
    cost = self.ocp.stage_cost
    return self.ocp.dynamics, cost.residual if isinstance(cost, LeastSquares) else cost

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The model functions and the SQP solver (and through it every generated function)."""
    return (*self.model_functions, self.sqp)

  @cached_property
  def context(self) -> _ControllerContext:
    """Sizes, the mode and the tables of the softened bounds and of the shifted warm start."""
    ocp = self.ocp
    shift_w, shift_g, shift_lam_x = _shift_tables(ocp)
    entries = ocp.soft_entries
    tables = {
      "soft_in_g": tuple(int(e.in_g) for e in entries),
      "soft_index": tuple(e.index for e in entries),
      "soft_side": tuple(SOFT_SIDES[e.side] for e in entries),
      "shift_w": shift_w,
      "shift_g": shift_g,
      "shift_lam_x": shift_lam_x,
    }
    scaled = ocp.scaled
    scales = {"w_scale": tuple(map(float, ocp.w_scale)), "g_scale": tuple(map(float, ocp.g_scale))} if scaled else {}
    return _ControllerContext(
      name=self.name, sqp=self.sqp.name, nx=ocp.nx, nu=ocp.nu, N=ocp.N, np=ocp.np, param_rows=ocp.param_rows,
      nh=ocp.nh, nhN=len(ocp.tree.leaves) * ocp.nhN,
      ns=ocp.ns, nw=ocp.nw, ng=ocp.ng, rti=self.options.mode == "rti", warm_start=self.options.warm_start,
      tables=tuple(tables.items()), scales=tuple(scales.items()), real=cpp_real(self.options.scalar),
      tuning=tuple(float(v) for v in ocp.default_tuning),
      tuning_doc=", ".join(f"{key} ({' x '.join(map(str, shape))})" for key, (_, shape, _) in ocp.tuning_layout.items())
      or "none", nx_model=ocp.nx_model, nh_model=ocp.nh_model, rate=ocp.rate is not None,
      rate_bounded=ocp.rate is not None and ocp.rate.bounded,
      rate_lb=() if ocp.rate is None else tuple(float(v) for v in ocp.rate.lower),
      rate_ub=() if ocp.rate is None else tuple(float(v) for v in ocp.rate.upper),
    )  # fmt: skip

  @property
  def header_code(self) -> str:
    """The declarations, without the Python-side defaults (the JIT's library: Python passes them on every call)."""
    return self._declarations(None)

  @property
  def exported_header_code(self) -> str:
    """The declarations with the Python-side defaults (`Defaults defaults`: bounds, tuning, limits) and call() by
    named `Options`, for a module a robot's code builds; the JIT's library leaves them out, so new defaults rebuild
    nothing."""
    flat = {key: tuple(float(v) for v in np.ravel(value)) for key, value in self.node_bounds(self.defaults).items()}
    exported = {**flat, "tuning": tuple(float(v) for v in self.ocp.default_tuning)}
    return self._declarations(exported) + self.render("_exported.hpp.j2", exported=exported)

  def _declarations(self, exported: dict[str, tuple[float, ...]] | None) -> str:
    """The controller's declarations (with the Python-side defaults where `exported`), then call() by structs."""
    return self.render(".hpp.j2", exported=exported) + self.render("_call.hpp.j2")

  # *** bounds ***

  def _bounds(
    self,
    x_bounds: Bounds | None,
    u_bounds: Bounds | None,
    constraint_bounds: Bounds | None,
    x_terminal_bounds: Bounds | None,
    terminal_constraint_bounds: Bounds | None,
    defaults: dict[str, F64] | None = None,
  ) -> dict[str, F64]:
    """Per-stage bound arrays (lbx, ubx, lbu, ubu, lbh, ubh, lbhN, ubhN), checked, from what the user gave."""
    N, nx, nu, nh, nhN = self.N, self.nx, self.nu, self.ocp.nh_model, self.ocp.nhN
    out: dict[str, F64] = {}
    spec = (("x", x_bounds, N + 1, nx), ("u", u_bounds, N, nu), ("h", constraint_bounds, N, nh))
    for key, given, rows, size in spec:
      if given is None and defaults is not None:
        out[f"lb{key}"], out[f"ub{key}"] = defaults[f"lb{key}"], defaults[f"ub{key}"]
      else:
        out[f"lb{key}"], out[f"ub{key}"] = _stage_bounds(self.name, f"{key}_bounds", given, rows, size)
    if x_terminal_bounds is not None:
      lo, hi = _stage_bounds(self.name, "x_terminal_bounds", x_terminal_bounds, 1, nx)
      out["lbx"], out["ubx"] = out["lbx"].copy(), out["ubx"].copy()
      out["lbx"][N], out["ubx"][N] = lo[0], hi[0]
    if terminal_constraint_bounds is None and defaults is not None:
      out["lbhN"], out["ubhN"] = defaults["lbhN"], defaults["ubhN"]
    else:
      lo, hi = _stage_bounds(self.name, "terminal_constraint_bounds", terminal_constraint_bounds, 1, nhN)
      out["lbhN"], out["ubhN"] = lo[0], hi[0]
    return out

  # *** JIT ***

  @cached_property
  def problem_key(self) -> str:
    """Cache key of the controller from what determines its code (a warm process finds the controller by it alone, so
    it skips tracing and deriving the NLP's functions, which the generated code's key needs): anvil's and OSQP's
    sources, the options, the OCP's sizes and softened bounds, and the keys of the user's functions (their traced
    graphs). Not the values of weights and penalties (the JIT's library takes them at run time,
    `exported_header_code`): their patterns only."""
    ocp = self.ocp
    anvil_sources = sources_fingerprint(Path(__file__).parent.parent)
    soft = [(e.group, e.stage, e.component, e.in_g, e.index, e.side, e.l1 > 0, e.l2 > 0) for e in ocp.soft_entries]
    parts = [self.name, anvil_sources, osqp.__version__, repr(self.options), repr(soft),
             _rate_key(ocp.rate), f"{ocp.N}|{ocp.nx}|{ocp.nu}|{ocp.np}|{ocp.nh}|{ocp.nhN}", repr(ocp.tree),
             repr(getattr(ocp, "uncertain", ())), ocp.w_scale.tobytes().hex() if ocp.scaled else "-"]  # fmt: skip
    for fn in (ocp.dynamics, ocp.stage_cost, ocp.terminal_cost, ocp.constraints, ocp.terminal_constraints):
      if isinstance(fn, LeastSquares):
        parts.append(f"{fn.residual.key}|{fn.weight.shape}|{np.packbits(fn.pattern).tobytes().hex()}")
      else:
        parts.append("-" if fn is None else fn.key)
    return problem_key_of("mpc", parts)

  @cached_property
  def _entry(self) -> _Entry:
    sizes = (self.nx, self.nu, self.np, self.ocp.default_tuning.size)
    nlp = (self.ocp.nw, self.ocp.ng, self.ocp.n_params)
    entry = _Entry(self.handle, self.stats_reader.buffers(), (self.ocp.N, self.ocp.param_rows), sizes,
                   self.options.scalar, nlp)  # fmt: skip
    entry.default_bounds = entry.bounds(self.node_bounds(self.defaults))
    entry.default_staged = entry.keep  # NOTE: alive as long as the pointers to them
    entry.default_limits = self.stats_reader.limits(None, None, None)
    return entry

  @cached_property
  def labels(self) -> OCPLabels:
    """Names of the OCP's stages, functions and bounds, for messages."""
    return OCPLabels(self)

  def reset(self) -> None:
    """Forget the previous solution and, with input-rate terms, the last input returned (the next call's default
    u_prev): the next call starts as the first did. What the controller was built with (bounds, weights, options)
    stays."""
    with self._lock:
      entry = self._entry
      entry.reset(entry.ws)

  def prepare(self) -> SQPStatus:
    """Real-time iteration: the preparation phase, to run while waiting for the next state. It shifts the previous
    solution and linearizes and factors the QP there, so the next call only solves it (the feedback phase). A no-op
    in full-SQP mode, before the first call, after reset() and without warm start. Returns "converged" or
    "numerical_error" (a NaN/inf, reported in detail by the next call)."""
    with self._lock:
      entry = self._entry
      return SQPStatus.from_code(entry.prepare(entry.ws))

  def tuning(self, weights: Mapping[str, Any] | None = None, soft_penalties: Mapping[str, Any] | None = None) -> F64:
    """The tuning vector a C++ `call(..., tuning)` takes for these weights and penalties (the build-time ones where
    not given; arguments as `__call__`'s), checked: the values to put in the robot's code to retune it."""
    return tuning_vector(self.name, self.ocp, weights, soft_penalties)

  def set_guess(self, x: ArrayLike, u: ArrayLike) -> None:
    """Start the next call from the trajectory x (N + 1, nx) and inputs u (N, nu) (every branch of a scenario tree
    from the same)."""
    xs = float_array(self.name, "x guess", x, (self.N + 1, self.nx), finite=True)
    us = float_array(self.name, "u guess", u, (self.N, self.nu), finite=True)
    if self.ocp.tree.branched:
      xs, us = self.ocp.tree.node_values(xs), self._node_inputs(us, 0.0)
    with self._lock:
      entry = self._entry
      xs, us = xs.astype(entry.dtype, copy=False), us.astype(entry.dtype, copy=False)
      entry.set_guess(xs.ctypes.data, us.ctypes.data, entry.ws)

  def __call__(
    self,
    x0: ArrayLike,
    p: ArrayLike | None = None,
    *,
    x_bounds: Bounds | None = None,
    u_bounds: Bounds | None = None,
    constraint_bounds: Bounds | None = None,
    x_terminal_bounds: Bounds | None = None,
    terminal_constraint_bounds: Bounds | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
    max_time: float | None = None,
    weights: Mapping[str, Any] | None = None,
    soft_penalties: Mapping[str, Any] | None = None,
    u_prev: ArrayLike | None = None,
  ) -> MPCSolution:
    """Solve from the state x0; p is the parameter ((np,) shared by all stages, or (N + 1, np) per stage); bounds
    given here replace the defaults for this call only, and so do the SQP's limits max_iter (at most the options'),
    tol and max_time (seconds), the weights of LeastSquares costs ({"stage_cost": W, "terminal_cost": W_N}) and the
    penalties of softened bounds ({group: (l1, l2)}), without a rebuild (`anvil.mpc.tuning`). With input-rate terms,
    u_prev is the input applied before (nu,) (default: the last u0 this controller returned, zeros at first). In
    real-time-iteration mode this is the feedback phase (it prepares first unless `prepare()` was called since the
    last call).

    A full-SQP call whose warm start (the previous plan shifted) ends "max_iterations" or "numerical_error" runs the
    SQP again from the cold guess within the time left (`stats["restarted_cold"]`; `iterations` counts both solves,
    the history is the second's). Whatever the status, `u0` is usable: when the SQP neither converged nor reached
    the acceptable level, the solution is the least-violation one (status "infeasible") or the call's initial guess
    (the previous plan shifted by one stage, or the cold guess) with its inputs clipped to their bounds (`fallback`
    says which); the next call then starts cold, or after an infeasible call from its plan shifted, restoring."""
    entered = time.perf_counter()
    changed = (x_bounds, u_bounds, constraint_bounds, x_terminal_bounds, terminal_constraint_bounds)
    bounds = self.defaults if all(b is None for b in changed) else self._bounds(*changed, defaults=self.defaults)
    given = max_iter is not None or tol is not None or max_time is not None
    limits = self.stats_reader.limits(max_iter, tol, max_time) if given else None
    state = self._state(x0)
    params = self.node_parameters(p) if p is not None or self.np else None
    tuned = weights is not None or soft_penalties is not None
    tuning = tuning_vector(self.name, self.ocp, weights, soft_penalties) if tuned else self.ocp.default_tuning
    if u_prev is not None:
      if self.ocp.rate is None:
        raise ValueError(f"{self.name}: u_prev is the previous input of input-rate terms; this MPC has none")
      u_prev = float_array(self.name, "u_prev", u_prev, (self.nu,), finite=True)
    with self._lock:
      return self._solve(state, params, bounds, limits, tuning, u_prev, entered)

  def _state(self, x0: ArrayLike) -> F64:
    """x0, checked (a finite float64 array of the right shape is taken as it is: the common case costs one test)."""
    if type(x0) is np.ndarray and x0.dtype == np.float64 and x0.shape == (self.nx,) and np.isfinite(x0).all():
      return x0
    return float_array(self.name, "x0", x0, (self.nx,), finite=True)

  def _solve(
    self,
    x0: F64,
    params: F64 | None,
    bounds: dict[str, F64],
    limits: Limits | None,
    tuning: F64,
    u_prev: F64 | None,
    entered: float,
  ) -> MPCSolution:
    """One call of the controller's C++ on checked inputs: stages them, calls, unpacks (under the lock). A finite
    max_time is the whole call's (`entered`: when it began): the C++ gets what is left of it after the Python before
    it (lock wait included), less what the Python after it took lately."""
    e = self._entry
    np.copyto(e.x0, x0)
    np.copyto(e.tuning[: tuning.size], tuning)
    if params is not None:
      np.copyto(e.p, params)
    if u_prev is not None:
      np.copyto(e.u_prev, u_prev)
    staged = e.default_bounds if bounds is self.defaults else e.bounds(self.node_bounds(bounds))
    limits = e.default_limits if limits is None else limits
    max_time = limits.max_time
    if np.isfinite(max_time):
      max_time = max(max_time - (time.perf_counter() - entered) - self._after, MIN_TIME)
    e.run(staged, limits, max_time, u_prev is not None)
    called = time.perf_counter()
    history, ihistory = e.stats
    s = e.scalars
    _, status, stats = self.stats_reader.unpack(history, ihistory, e.sqp_scalars, bounds, self.labels)
    stats["restarted_cold"] = bool(s.restarted_cold)
    x, u = e.x.astype(np.float64), e.u.astype(np.float64)  # NOTE: copies (the buffers are the next call's)
    branches: dict[str, Any] = {}
    if self.ocp.tree.branched:  # NOTE: each branch's nodes, root to leaf; x and u the first branch's
      paths = np.asarray(self.ocp.tree.paths)
      branches = {"x_scenarios": x[paths], "u_scenarios": u[paths[:, :-1]]}
      x, u = branches["x_scenarios"][0], branches["u_scenarios"][0]
    call_outcome = outcome(s)
    fallback = call_outcome["fallback"]
    if status == "numerical_error" and isinstance(self.ocp.dynamics, ExplicitIntegrator):
      stats["message"] = self._integrator_hint(str(stats.get("message", status)), x0, u[0], params)
    # NOTE: no sensitivity over a tree, nor of a scaled NLP (its are in its own units)
    solved = self.options.mode == "sqp" and status in SUCCESS and fallback == "none" and self.ocp.cost_by_stage
    solution = MPCSolution(x=x, u=u, status=status, real_time_iteration=self.options.mode == "rti", stats=stats,
                           at_solution=self._sensitivity(e) if solved else None, nlp_sizes=(self.ocp.nx, self.np),
                           **call_outcome, **branches)  # fmt: skip
    self._after = max(time.perf_counter() - called, AFTER_DECAY * self._after)
    return solution

  def _integrator_hint(self, message: str, x0: F64, u0: F64, params: F64 | None) -> str:
    """The message of a failed solve, with why an explicit integrator's discrete model diverges at x0 if it does."""
    dynamics = self.ocp.dynamics
    assert isinstance(dynamics, ExplicitIntegrator)
    p = None if params is None or not self.np else np.asarray(params).reshape(-1, self.np)[0]
    hint = dynamics.unstable_hint(x0, np.nan_to_num(u0), p)
    return f"{message} ({hint})" if hint else message

  def _sensitivity(self, e: _Entry) -> Callable[[], Sensitivity]:
    """The sensitivity of the last call's solution, computed when asked (its NLP state copied now)."""
    w, lam_g, lam_x, params, lbw, ubw, lbg, ubg = e.solution_state()
    return lambda: self.sqp.sensitivity_at(w, params, lam_g, lam_x, (lbw, ubw, lbg, ubg))

  def node_parameters(self, p: ArrayLike | None = None) -> F64:
    """The parameter rows the C++ call() takes (param_rows x np) for a call's p ((np,) or per stage (N + 1, np)),
    checked: p itself for a nominal MPC; over a scenario tree each node's and each transition's, the scenarios' values
    in their components (`p` may be omitted where the scenarios give every component)."""
    N, np_, ocp = self.N, self.np, self.ocp
    covered = ocp.scenarios is not None and len(ocp.uncertain) == np_  # NOTE: every component of p is the scenarios'
    if p is None and not covered:
      if np_:
        raise ValueError(f"{self.name}: p is required: the functions take a parameter p of length {np_}; pass p")
      return np.zeros(0)
    arr = np.zeros(np_) if p is None else float_array(self.name, "p", p, None, finite=True)
    if arr.shape == (np_,):
      arr = np.ascontiguousarray(np.broadcast_to(arr, (N + 1, np_)))
    elif arr.shape != (N + 1, np_):
      raise ValueError(f"{self.name}: p: expected shape ({np_},) or per stage ({N + 1}, {np_}), got {arr.shape}")
    return ocp.node_parameters(arr)

  def node_bounds(self, bounds: Mapping[str, F64]) -> dict[str, F64]:
    """Per-stage bounds (`defaults`' keys) as the C++ takes them: a chain's as they are; over a scenario tree per
    node (its stage's; a leaf's inputs fixed at 0 and its path constraints free), the terminal constraints' per leaf."""
    tree = self.ocp.tree
    if not tree.branched:
      return dict(bounds)
    h = {key: np.concatenate([bounds[key], np.full((1, bounds[key].shape[1]), fill)])
         for key, fill in (("lbh", -np.inf), ("ubh", np.inf))}  # fmt: skip
    leaves = len(tree.leaves)
    return {"lbx": tree.node_values(bounds["lbx"]), "ubx": tree.node_values(bounds["ubx"]),
            "lbu": self._node_inputs(bounds["lbu"], 0.0), "ubu": self._node_inputs(bounds["ubu"], 0.0),
            "lbh": tree.node_values(h["lbh"])[: tree.N], "ubh": tree.node_values(h["ubh"])[: tree.N],
            "lbhN": np.tile(bounds["lbhN"], leaves), "ubhN": np.tile(bounds["ubhN"], leaves)}  # fmt: skip

  def _node_inputs(self, per_stage: F64, leaf: float) -> F64:
    """Per-stage input rows (N, nu) as a tree's per node k < N (its stage's; `leaf` at leaves)."""
    tree = self.ocp.tree
    rows = np.concatenate([per_stage, np.full((1, per_stage.shape[1]), leaf)])
    return np.ascontiguousarray(rows[np.asarray(tree.depth[: tree.N])])


#: The least max_time the C++ gets (a positive one: the solve stops at its first look at the clock).
MIN_TIME = 1e-9
#: How fast the estimate of a call's Python time after its C++ forgets an outlier (a garbage collection), per call.
AFTER_DECAY = 0.95


def _with_bounds(name: str, what: str, fn: Any, bounds: Bounds | None) -> tuple[Any, Bounds | None]:
  """Constraints given as (function, (lower, upper)) split into the function and its bounds."""
  if isinstance(fn, tuple):
    if len(fn) != 2 or bounds is not None:
      raise ValueError(f"{name}: {what} must be a function, or (function, (lower, upper)) without {what[:-1]}_bounds")
    return fn[0], fn[1]
  return fn, bounds


class _Entry:
  """The loaded controller: its entry points, workspace, and the buffers and structs one call passes (allocated once,
  so a call converts nothing but x0, p and the tuning)."""

  def __init__(
    self,
    handle: NativeHandle,
    stats: tuple[Any, ...],
    stages: tuple[int, int],
    sizes: tuple[int, int, int, int],
    scalar: str,
    sizes_nlp: tuple[int, int, int],
  ) -> None:
    nx, nu, np_, n_tuning = sizes
    N, param_rows = stages  # NOTE: the NLP's stages (a tree's nodes) and its parameter rows
    pointer = ctypes.c_void_p
    self.dtype = np.dtype(scalar)  # NOTE: the controller's own type: x0, p, bounds and the plan are staged in it
    self.call = handle.entry("call", ctypes.c_int, *[pointer] * 11)
    self.u_prev = np.zeros(nu, self.dtype)
    self.reset = handle.entry("reset", None, pointer)
    self.set_guess = handle.entry("set_guess", None, pointer, pointer, pointer)
    self.prepare = handle.entry("prepare", ctypes.c_int, pointer)
    self.ws, self.stats = handle.pointer, stats
    self.x0, self.p = np.zeros(nx, self.dtype), np.zeros((param_rows, np_), self.dtype)
    self.tuning = np.zeros(max(n_tuning, 1), self.dtype)
    self.x, self.u = np.zeros((N + 1, nx), self.dtype), np.zeros((N, nu), self.dtype)
    self.sqp_scalars, self.scalars = SQP_SCALARS.mirror(), CALL_SCALARS.mirror()
    self.options = CALL_OPTIONS.mirror(tuning=self.tuning.ctypes.data)
    self.arrays = (self.x0.ctypes.data, self.p.ctypes.data)  # x0, p; then bounds and options
    self.outputs = (self.x.ctypes.data, self.u.ctypes.data, *(a.ctypes.data for a in stats),
                    ctypes.addressof(self.sqp_scalars), ctypes.addressof(self.scalars))  # fmt: skip
    self.solution = handle.entry("solution", None, pointer, pointer)
    nw, ng, n_params = sizes_nlp
    self.state = [np.zeros(size, self.dtype) for size in (nw, ng, nw, n_params, nw, nw, ng, ng)]
    self.state_pointers = (ctypes.c_void_p * 8)(*(a.ctypes.data for a in self.state))
    self.keep: list[Any] = []
    self.default_staged: list[Any] = []
    self.default_bounds = CALL_BOUNDS.mirror()
    self.default_limits = Limits(0, 0.0, 0.0)

  def solution_state(self) -> list[F64]:
    """Copies (float64) of the last solve's NLP solution w, multipliers lam_g and lam_x, parameter and bounds lbw,
    ubw, lbg, ubg."""
    self.solution(self.state_pointers, self.ws)
    return [a.astype(np.float64) for a in self.state]

  def bounds(self, bounds: dict[str, F64]) -> ctypes.Structure:
    """The Bounds struct of a call's bounds, staged in the controller's type (kept alive until the next one)."""
    staged = {k: bounds[k].astype(self.dtype, copy=False) for k in CALL_BOUNDS.names}
    self.keep = [staged]
    return CALL_BOUNDS.mirror(*(staged[k].ctypes.data for k in CALL_BOUNDS.names))

  def run(self, bounds: ctypes.Structure, limits: Limits, max_time: float, u_prev: bool) -> None:
    """One call with `bounds`, the limits (max_iter, tol; max_time given apart: what is left of the call's) and the
    staged u_prev if `u_prev` (else none: the controller's last input)."""
    o = self.options
    o.max_iter, o.tol, o.max_time = limits.max_iter, limits.tol, max_time
    o.u_prev = self.u_prev.ctypes.data if u_prev else None
    self.call(*self.arrays, ctypes.addressof(bounds), ctypes.addressof(o), *self.outputs, self.ws)


def _rate_key(rate: InputRate | None) -> str:
  """The exact values of an input rate's terms, for the cache key."""
  return "-" if rate is None else "|".join(a.tobytes().hex() for a in (rate.weight, rate.lower, rate.upper))


def _stage_bounds(name: str, what: str, given: Bounds | None, rows: int, size: int) -> tuple[F64, F64]:
  """(lower, upper) as (rows, size) arrays from None (no bounds), (size,) or (rows, size) values, checked."""
  if given is None:
    return np.full((rows, size), -np.inf), np.full((rows, size), np.inf)
  if not isinstance(given, (tuple, list)) or len(given) != 2:
    raise TypeError(f"{name}: {what} must be a pair (lower, upper)")
  pair = []
  for side, value in zip(("lower", "upper"), given, strict=True):
    arr = float_array(name, f"{what} {side}", value, None)
    if arr.shape in ((), (size,)):
      arr = np.broadcast_to(arr, (rows, size))
    elif arr.shape != (rows, size):
      raise ValueError(
        f"{name}: {what} {side}: expected shape ({size},) or per stage ({rows}, {size}), got {arr.shape}"
      )
    pair.append(np.ascontiguousarray(arr))
  lo, hi = pair
  check_bounds(name, what, lo, hi, lambda i: f"stage {i[0]}, component {i[1]}")
  return lo, hi


def _shift_tables(ocp: Transcription) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
  """Source index of each entry of w, λ_g and λ_x when the previous solution is shifted by one stage (-1: zero): each
  stage takes its first child's values (the next stage's in a chain; a leaf keeps its own)."""
  N, nx, nz, nh, ns = ocp.N, ocp.nx, ocp.nz, ocp.nh, ocp.ns
  child = ocp.tree.first_child
  w = list(range(ocp.nw))
  for k in range(N):
    for i in range(nx if child[k] == N else nz if child[k] > 0 else 0):  # x_{N-1} <- x_N; u_{N-1} is repeated
      w[k * nz + i] = child[k] * nz + i
  entries = ocp.soft_entries
  where = {(e.group, e.stage, e.component): j for j, e in enumerate(entries)}
  successor = [where.get((e.group, child[e.stage], e.component), j) for j, e in enumerate(entries)]
  slack0 = N * nz + nx
  for j, s in enumerate(successor):
    w[slack0 + j] = slack0 + s
  lam_x = [-1 if i < nx else v for i, v in enumerate(w)]
  g = list(range(ocp.ng))
  for i in range(nx):
    g[i] = nx + (child[0] - 1) * nx + i  # the x_0 constraint takes the multiplier of the first defect
  for k in range(N):
    if (c := child[k + 1]) > 0:  # the defect into stage k + 1 takes the one into its first child
      for i in range(nx):
        g[nx + k * nx + i] = nx + (c - 1) * nx + i
    if 0 < (c := child[k]) < N:
      for i in range(nh):
        g[nx * (N + 1) + k * nh + i] = nx * (N + 1) + c * nh + i
  rows = ocp.ng - 2 * ns
  for j, s in enumerate(successor):
    g[rows + j], g[rows + ns + j] = rows + s, rows + ns + s
  # NOTE: the multipliers are shifted in place (anvil/mpc.hpp): every source at or after its entry (a child comes
  # after its parent; the soft entries are stage-major within their group, so a successor comes later)
  assert all(s < 0 or s >= i for table in (g, lam_x) for i, s in enumerate(table)), "a shift moves entries back"
  return tuple(w), tuple(g), tuple(lam_x)


def _soft_with_terminal(soft: Mapping[str, Soft] | None, x_terminal_bounds: Bounds | None) -> Mapping[str, Soft] | None:
  """`soft` with x_N's bounds softened as the other states' when they are x_bounds' own (no x_terminal_bounds) and
  "x_terminal" is not given: soft={"x": ...} then covers every bounded state, as users expect."""
  if not isinstance(soft, Mapping) or "x" not in soft or "x_terminal" in soft or x_terminal_bounds is not None:
    return soft
  return {**soft, "x_terminal": soft["x"]}
