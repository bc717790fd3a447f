"""`SQPFunction`: a nonlinear program solved by generated C++: the SQP loop of anvil/sqp.hpp, its QPs solved by
backends of the QP layer (anvil.qp) through the one QP contract."""

from __future__ import annotations

import ctypes
import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import osqp
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from anvil.ad import gradient as cost_gradient
from anvil.codegen import FunctionBase, NumericalFunction
from anvil.codegen.base import check_identifier
from anvil.codegen.boundary import BoundaryCode
from anvil.codegen.cache import cache_dir, read_artifact, write_atomic
from anvil.codegen.forksafe import owned_lock
from anvil.codegen.jit import sources_fingerprint
from anvil.codegen.names import DERIVED_ROOM
from anvil.codegen.precision import SCALARS, cpp_real, in_precision
from anvil.codegen.sparse import entry_positions, stored_coordinates
from anvil.codegen.templated import TemplatedFunction, problem_key_of
from anvil.qp import (
  QPBackend,
  QPOptions,
  QPProblem,
  RiccatiOptions,
  StageLayout,
  StageReport,
  StageSearch,
  search_stages,
)
from anvil.qp.backend import DerivativeSources
from anvil.qp.registry import qp_backend
from anvil.sqp.boundary import SQP_BOUNDS, SQP_OPTIONS, SQP_SCALARS, sqp_boundary
from anvil.sqp.labels import NLPLabels
from anvil.sqp.nlp import NLP, Fn, SparseDerivative
from anvil.sqp.options import SQPOptions
from anvil.sqp.result import SQPResult
from anvil.sqp.sensitivity import Sensitivity, SensitivityFunction
from anvil.sqp.stats import StatsReader, elastic_options, qp_options
from anvil.validation import check_bounds, float_array, require_cpu_float64, require_type


@runtime_checkable
class StepTaker(Protocol):
  """Generated constraints that can take the integrator steps a constraint Jacobian's evaluation kept (anvil.mpc's
  stage-wise constraints: C++ `call_reusing(x, p, g, ws, kept)`, each stage's step reused where its inputs are the
  last Jacobian evaluation's, the same values to the bit)."""

  def takes_steps_from(self, jacobian: object) -> bool: ...


@dataclass(frozen=True)
class _SolverContext:
  """What the SQP templates need: sizes, the names of the functions and QP backends it calls, options, tables."""

  name: str
  n: int
  m: int
  np: int
  cost: str
  gradient: str
  constraints: str
  jacobian: str
  hessian: str
  evaluations: tuple[str, ...]
  nnz_jac: int
  nnz_hess: int
  nnz_P: int
  nnz_A: int
  nnz_Ae: int
  qp: str
  elastic: str
  elastic_rows: bool
  direct_load: bool
  reuses_steps: bool
  kept_equal: tuple[tuple[str, tuple[int, ...], str], ...]  # (C++ name, indices, what they are), for C++ callers
  convex_hessian: bool
  options: SQPOptions
  tables: tuple[tuple[str, tuple[int, ...]], ...]
  real: str

  @property
  def boundary(self) -> BoundaryCode:
    """Its boundary structs' C++ (anvil/sqp/boundary.py)."""
    return sqp_boundary(self.name)


def _xp_args(name: str, fn: Fn, what: str, scalar: str) -> tuple[int, int]:
  """(n, np) of a function of (x, p): float64 vectors (or of the solver's scalar type)."""
  require_type(name, what, fn, (NumericalFunction,), "a NumericalFunction of (x, p)")
  if len(fn.inputs) != 2 or len(fn.inputs[0].shape) != 1:
    raise TypeError(f"{name}: {what} must be a NumericalFunction of (x, p) with x a vector")
  n, p = fn.inputs[0], fn.inputs[1]
  if len(p.shape) != 1:
    raise TypeError(f"{name}: the parameter of {what} {fn.name} must be a vector (Arg(0) for none)")
  require_cpu_float64(name, what, fn, scalar=SCALARS[scalar])
  return n.shape[0], p.shape[0]


def _check_outputs(name: str, fn: Fn, what: str) -> None:
  """ValueError unless the cost returns one scalar and the constraints one vector (this traces fn: its errors come at
  construction, not at the first call)."""
  outputs = [tuple(o.shape) for o in fn.outputs]
  if what == "cost" and outputs != [()]:
    raise ValueError(
      f"{name}: cost {fn.name} must return one scalar (shape (); e.g. t.sum() or t[0] of a 1-vector), "
      f"got outputs shaped {outputs}"
    )
  if what == "constraints" and (len(outputs) != 1 or len(outputs[0]) > 1):
    raise ValueError(f"{name}: constraints {fn.name} must return one vector (m,), got outputs shaped {outputs}")


class SQPFunction(TemplatedFunction):
  """minimize f(x, p) subject to lbg ≤ g(x, p) ≤ ubg and lbx ≤ x ≤ ubx, solved by generated C++.

  The solver's C++ evaluates f, ∇f, g, the sparse ∂g/∂x and the sparse Lagrangian Hessian (its dependencies, emitted
  in the same module), regularizes the Hessian only when a QP is nonconvex, solves each QP with a backend generated
  for the QPs' fixed patterns (`options.qp`; by default the Riccati interior point when the NLP has the stage
  structure of an optimal control problem, given as `stages` or detected in the patterns of ∂g/∂x and the Hessian
  (`anvil.qp.detect_stages`: multiple shooting written as a loop over the stages, in any order of variables and
  rows), else the sparse interior point; OSQP's own C code, polished, when asked for), and takes steps by a
  backtracking filter line search (objective vs L1 violation, Wächter and Biegler). When the linearized constraints
  are inconsistent, a QP fails or no step is acceptable, a feasibility restoration phase solves the elastic NLP
  min f + rho (L1 violation of the elastic rows) subject to the rows its QPs keep hard (elastic QPs: with a stage
  layout the Riccati interior point's elastic rows, else slacks on every row, solved by the sparse interior point or
  OSQP; a filter line search of its own) until the violation is reduced enough, or ends "infeasible" at the
  least-violation point.

  Args:
    name: a C++ identifier.
    cost: a NumericalFunction of (x, p) returning a scalar.
    constraints: a NumericalFunction of (x, p) returning a vector, or None.
    options: SQPOptions.
    hessian: optional Hessian approximation replacing the exact Lagrangian Hessian (e.g. Gauss-Newton): a
      SparseNumericalFunction of (x, p, sigma, λ) returning the upper triangle of an n x n matrix (or a generated
      function with its C++ interface and pattern attributes, as anvil.mpc's stage-wise derivatives).
    jacobian: optional constraint Jacobian replacing `spjacobian(constraints)`: a SparseNumericalFunction of (x, p)
      returning the m x n ∂g/∂x (or alike, as `hessian`); its values must be the Jacobian's.
    constraints_code: optional generated code evaluating g in place of the code of `constraints` (a FunctionBase
      with a NumericalFunction's C++ interface, same inputs and output, e.g. an MPC's stage-wise constraints, whose
      integrator runs as a loop); `constraints` still defines g for everything else (derivatives not given; the
      number of rows, unless the code states it as `size`).
    gradient: optional generated code of the cost's gradient in place of `gradient(cost)` (a FunctionBase with a
      NumericalFunction's C++ interface, of (x, p) returning n values, e.g. an MPC's stage-wise cost gradient).
    convex_hessian: `hessian` is positive semidefinite wherever it is evaluated (Gauss-Newton with PSD weights): the
      real-time iteration's preparation then loads its QP without the inertia test (a sparse KKT factorization) that
      otherwise decides its regularization. Needs `hessian`.
    stages: where x's entries and g's rows sit in the stages of an optimal control problem (a StageLayout), for the
      Riccati interior point (ignored by the general QP solvers); None: detected when `options.qp` is None or
      RiccatiOptions (`layout` is the one used). The initial and dynamics rows of a layout are equalities: a call
      must give them lbg = ubg.

  Calls are thread-safe: each converts its inputs into arrays of its own and gets fresh outputs, and the C++ solve
  (which holds the GIL) runs under this object's lock, so calls from several threads never share a buffer.

  Example:
    >>> f = NumericalFunction("f", lambda x, p: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2, (Arg(2), Arg(0)))
    >>> res = SQPFunction("rosen", f)(np.zeros(2), np.zeros(0), -np.inf * np.ones(2), np.inf * np.ones(2), [], [])
  """

  template = "sqp"
  header_runtime = ("sqp",)

  def __init__(
    self,
    name: str,
    cost: Fn,
    constraints: Fn | None = None,
    options: SQPOptions | None = None,
    *,
    hessian: SparseDerivative | None = None,
    stages: StageLayout | None = None,
    convex_hessian: bool = False,
    jacobian: SparseDerivative | None = None,
    constraints_code: FunctionBase | None = None,
    gradient: FunctionBase | None = None,
  ) -> None:
    self.name = check_identifier(name, "SQPFunction name", DERIVED_ROOM)
    if options is not None and not isinstance(options, SQPOptions):
      raise TypeError(f"{name}: options must be SQPOptions, got {type(options).__name__}")
    self.options = options or SQPOptions()
    self.scalar = self.options.scalar
    self.n, self.np = _xp_args(name, cost, "cost", self.scalar)
    if constraints is not None and _xp_args(name, constraints, "constraints", self.scalar) != (self.n, self.np):
      raise ValueError(f"{name}: cost and constraints must take the same x ({self.n}) and p ({self.np})")
    cost = in_precision(cost, self.scalar, f"{name}_cost")
    constraints = None if constraints is None else in_precision(constraints, self.scalar, f"{name}_constraints")
    if stages is not None and not isinstance(stages, StageLayout):
      raise TypeError(f"{name}: stages must be a StageLayout, got {type(stages).__name__}")
    if stages is None and constraints is None and isinstance(self.options.qp, RiccatiOptions):
      raise ValueError(f"{name}: RiccatiOptions solves QPs with a stage layout: pass stages=StageLayout(...)")
    self.cost, self.constraints, self.stages = cost, constraints, stages
    if gradient is not None:
      shapes = [tuple(a.shape) for a in getattr(gradient, "inputs", ())]
      if not isinstance(gradient, FunctionBase) or shapes != [(self.n,), (self.np,)]:
        raise TypeError(f"{name}: gradient must be a generated function of (x, p) shaped ({self.n},), ({self.np},)")
    self.gradient = cost_gradient(cost, 0, name=f"{name}_cost_gradient") if gradient is None else gradient
    if constraints_code is not None and (constraints is None or not isinstance(constraints_code, FunctionBase)):
      raise TypeError(f"{name}: constraints_code must be a generated function (FunctionBase), with constraints")
    self.constraints_code = constraints_code
    # NOTE: a plain NLP's functions are checked now (tracing them); one given its derivatives, code or layout (as an
    # MPCFunction builds it from functions it checked) is checked where those are built: a warm build traces nothing
    if all(given is None for given in (hessian, jacobian, stages, constraints_code, gradient)):
      _check_outputs(name, cost, "cost")
      if constraints is not None:
        _check_outputs(name, constraints, "constraints")
    self.nlp = NLP(self.name, cost, constraints, self.n, self.np, self.scalar, jacobian, hessian, constraints_code)
    for given, what in ((hessian, "hessian"), (jacobian, "jacobian")):
      if given is not None:
        self._check_derivative(given, what)
    if not isinstance(convex_hessian, bool) or (convex_hessian and hessian is None):
      raise ValueError(f"{name}: convex_hessian=True declares a given hessian positive semidefinite; pass hessian=")
    self.convex_hessian = convex_hessian
    self._given = any(given is not None for given in (hessian, jacobian, stages, constraints_code, gradient))
    self._lock = owned_lock(self)

  def _check_derivative(self, fn: SparseDerivative, what: str) -> SparseDerivative:
    """TypeError/ValueError unless `fn` is a sparse derivative of the right inputs and shape (a Hessian: an upper
    triangle)."""
    if what == "jacobian" and self.constraints is None:
      raise ValueError(f"{self.name}: jacobian= needs constraints")
    m = self.m
    expected = ((self.n,), (self.np,), (1,), (m,)) if what == "hessian" else ((self.n,), (self.np,))
    shape = (self.n, self.n) if what == "hessian" else (m, self.n)
    attributes = ("inputs", "shape", "indices", "indptr", "nnz")
    if not isinstance(fn, FunctionBase) or not all(hasattr(fn, a) for a in attributes):
      raise TypeError(f"{self.name}: {what} must be a SparseNumericalFunction, got {type(fn).__name__}")
    if tuple(tuple(a.shape) for a in fn.inputs) != expected:
      args = "(x, p, sigma, lam)" if what == "hessian" else "(x, p)"
      raise TypeError(f"{self.name}: {what} must be a SparseNumericalFunction of {args} shaped {expected}")
    if any(a.dtype != SCALARS[self.scalar] for a in fn.inputs):
      raise TypeError(f"{self.name}: {what} must take {self.scalar} inputs (SQPOptions.scalar)")
    rows = np.asarray(fn.indices)
    cols = np.repeat(np.arange(fn.shape[1]), np.diff(fn.indptr))
    if tuple(fn.shape) != shape or (what == "hessian" and np.any(rows > cols)):
      kind = f"the upper triangle of an {self.n}x{self.n} matrix" if what == "hessian" else f"an {shape} matrix"
      raise ValueError(f"{self.name}: {what} must return {kind}")
    return fn

  @property
  def m(self) -> int:
    """Number of constraints (`NLP.m`)."""
    return self.nlp.m

  @property
  def jacobian(self) -> SparseDerivative | None:
    """The sparse ∂g/∂x (the one given, else derived), or None without constraints (`NLP.jacobian`)."""
    return self.nlp.jacobian

  @property
  def hessian(self) -> SparseDerivative:
    """The upper triangle of the Hessian of sigma·f + λᵀg in x (or the approximation given), a function of
    (x, p, sigma, λ) (`NLP.hessian`)."""
    return self.nlp.hessian

  @cached_property
  def sensitivity_function(self) -> SensitivityFunction:
    """The solution sensitivity generated as C++ (`SQPResult.sensitivity` calls it; compiled on first use, or put in
    a module beside the solver)."""
    return SensitivityFunction(self.nlp)

  # *** the QPs ***

  @cached_property
  def _patterns(self) -> tuple[sp.csc_array, sp.csc_array, sp.csc_array, sp.csc_array]:
    """The patterns of the Lagrangian Hessian (upper triangle), of ∂g/∂x, and of the QPs' P and A."""
    n, m = self.n, self.m
    hess = _pattern(self.hessian, (n, n))
    jac = sp.csc_array((m, n)) if self.jacobian is None else _pattern(self.jacobian, (m, n))
    eye = sp.csc_array(sp.eye_array(n, format="csc"))
    return hess, jac, _sorted(sp.triu(hess + eye)), _sorted(sp.vstack([jac, eye]))

  @cached_property
  def layout(self) -> StageLayout | None:
    """The stage layout the QPs are solved with: `stages`, else (with `options.qp` None or RiccatiOptions) the one
    `anvil.qp.search_stages` finds in the patterns, where the Riccati backend accepts it, else None (`structure`
    says why; where the patterns looked like an optimal control problem, stages found before the structure broke, a
    warning on the `anvil` logger too)."""
    if self.stages is not None or not self._searches:
      return self.stages
    search = self._stage_search
    if search.layout is None and isinstance(self.options.qp, RiccatiOptions):
      raise ValueError(f"{self.name}: RiccatiOptions solves QPs with a stage layout: none was found in the patterns "
                       f"of the constraint Jacobian and the Hessian ({self._reason}); pass "
                       "stages=StageLayout(...)")  # fmt: skip
    if search.layout is None and search.stages > 1:
      logging.getLogger("anvil").warning("%s: no stage structure, so its QPs are solved by the sparse interior point, "
                                         "not the Riccati one: %s", self.name, self._reason)  # fmt: skip
    return search.layout

  @property
  def _searches(self) -> bool:
    """Whether the stage layout is searched for: none given, and the QP solver is the default or the Riccati one."""
    return self.stages is None and self.constraints is not None and isinstance(self.options.qp, RiccatiOptions | None)

  @cached_property
  def _stage_search(self) -> StageSearch:
    """The search for a stage layout in the patterns of ∂g/∂x and the Hessian, what it found checked by the Riccati
    backend."""
    hess, jac, p_pattern, a_pattern = self._patterns
    constants = getattr(self.jacobian, "constant_entries", None)
    if constants is None:
      return StageSearch(None, "the constraint Jacobian given does not say which of its entries are constant")
    search = search_stages(jac, constants, hess)
    if search.layout is not None:
      try:
        qp_backend(RiccatiOptions(), f"{self.name}_qp", QPProblem(p_pattern, a_pattern, search.layout))
      except ValueError as error:  # NOTE: a layout the patterns do not fit (the backend checks every entry)
        reason = str(error).removeprefix(f"{self.name}_qp: ").replace("{", "{{").replace("}", "}}")
        return StageSearch(
          None, f"the Riccati interior point cannot take the stages found: {reason}", stages=search.stages
        )
    return search

  @property
  def _reason(self) -> str:
    """Why the search found no layout, in the NLP's terms."""
    return self._stage_search.explain(lambda r: self.labels.row(r)[1], lambda j: self.labels.variable(j)[1])

  @cached_property
  def structure(self) -> StageReport:
    """The stage structure the QPs are solved with: the layout (given or found: stages, states, inputs, which rows
    are initial, dynamics, path and terminal) or why none was found; `print(solver.structure)` says it in a line."""
    if self.stages is not None:
      origin, reason = "given", ""
    elif not self._searches:
      origin, reason = "not searched", ""
    else:
      origin = "found" if self.layout is not None else "not found"
      reason = "" if self.layout is not None else self._reason
    return StageReport(self.layout, origin, self.qp_options.solver, reason)

  @cached_property
  def qp_options(self) -> QPOptions:
    """The QP solver's options: `options.qp`, else RiccatiOptions() with a stage layout and SparseIPMOptions()
    without."""
    options = qp_options(self.options, self.layout is not None)
    if self.scalar != "float64" and not (isinstance(options, RiccatiOptions) and self.layout is not None):
      raise ValueError(f"{self.name}: SQPOptions(scalar={self.scalar!r}) solves its QPs by the Riccati interior point "
                       "(OSQP and the sparse interior point factor in double), which needs the stage layout of an "
                       "optimal control problem: given as stages= or found in the patterns; none was")  # fmt: skip
    return options

  @cached_property
  def _qp_layout(self) -> tuple[QPProblem, QPProblem, dict[str, tuple[int, ...]]]:
    """The QPs' fixed patterns (normal and elastic) and the maps from derivative values into their matrices.

    P is the upper triangle of the Lagrangian Hessian plus the full diagonal (for regularization); A stacks ∂g/∂x on
    the identity (bounds on x are QP constraints). The elastic QP adds slacks v, w ≥ 0 to every constraint row
    (J d + v - w), so it is always feasible; its P and A extend the same patterns.
    """
    n, m = self.n, self.m
    hess, jac, p_pattern, a_pattern = self._patterns
    eye, eye_m = sp.csc_array(sp.eye_array(n, format="csc")), sp.csc_array(sp.eye_array(m, format="csc"))
    zeros = lambda r, c: sp.csc_array((r, c))
    pe_pattern = _sorted(sp.block_diag([p_pattern, zeros(2 * m, 2 * m)]))
    slack = sp.csc_array(sp.vstack([sp.hstack([eye_m, -eye_m]), zeros(n, 2 * m), sp.eye_array(2 * m)]))
    ae_pattern = _sorted(sp.hstack([sp.vstack([jac, eye, zeros(2 * m, n)]), slack]))
    no_slack = zeros(3 * m + n, 2 * m)
    tables = {
      "hess_to_P": _positions(p_pattern, hess),
      "diag_P": _positions(p_pattern, eye),
      "jac_to_A": _positions(a_pattern, sp.vstack([jac, zeros(n, n)])),
      "eye_to_A": _positions(a_pattern, sp.vstack([zeros(m, n), eye])),
      "jac_to_Ae": _positions(ae_pattern, sp.hstack([sp.vstack([jac, zeros(n + 2 * m, n)]), no_slack])),
      "eye_to_Ae": _positions(ae_pattern, sp.hstack([sp.vstack([zeros(m, n), eye, zeros(2 * m, n)]), no_slack])),
      "slack_to_Ae": _positions(ae_pattern, sp.hstack([zeros(3 * m + n, n), slack])),
      "jac_p": tuple(int(v) for v in jac.indptr),
      "jac_i": tuple(int(v) for v in jac.indices),
      "hess_p": tuple(int(v) for v in self.hessian.indptr),
      "hess_i": tuple(int(v) for v in self.hessian.indices),
      "hard_rows": self.hard_rows,
    }
    sources = DerivativeSources(tables["hess_to_P"], tables["diag_P"], tables["jac_to_A"]) if self.direct_load else None
    normal = QPProblem(p_pattern, a_pattern, self.layout, scalar=self.scalar, sources=sources)
    return normal, QPProblem(pe_pattern, ae_pattern), tables

  @property
  def direct_load(self) -> bool:
    """Whether the QP backend loads each QP from the Hessian and the Jacobian themselves (the Riccati interior point,
    which solves the elastic QPs too): the loop then keeps no copy of P and A."""
    return self.layout is not None and isinstance(self.qp_options, RiccatiOptions)

  @cached_property
  def qp(self) -> QPBackend:
    """The backend solving the QPs of the iteration (`qp_options`)."""
    return qp_backend(self.qp_options, f"{self.name}_qp", self._qp_layout[0])

  @cached_property
  def elastic(self) -> QPBackend | None:
    """The backend solving the elastic QPs, or None when the QP backend solves them itself (`stats.elastic_options`:
    with a stage layout the Riccati interior point's elastic rows, stage rows and state bounds elastic, initial,
    dynamics and input rows hard, its QPs always feasible; without one, slacks on every constraint row)."""
    options = elastic_options(self.options, self.layout is not None)
    if options is None:
      return None
    normal, elastic, _ = self._qp_layout
    return qp_backend(options, f"{self.name}_elastic", normal if self.layout is not None else elastic)

  @property
  def equality_rows(self) -> tuple[int, ...]:
    """The rows of g the QPs keep equal to their lower bound (the initial and dynamics rows of the stage layout): a
    call must give lbg = ubg there."""
    return self._layout_facts[1]

  @property
  def fixed_variables(self) -> tuple[int, ...]:
    """The variables the QPs keep at their bounds as x_0's initial values, where the stage layout fixes x_0 by its
    bounds (StageLayout.initial_bounds, as found when no row fixes it): a call must give lbx = ubx there."""
    return self._layout_facts[2]

  @cached_property
  def problem_key(self) -> str | None:
    """Where the NLP is given by its functions alone (no derivative, code or layout given: those are an owner's,
    which keys its solver itself, as MPCFunction does), a key of their traced graphs, the options and the sizes; None
    otherwise (TemplatedFunction.library)."""
    if self._given:
      return None
    functions = [self.cost.key, "-" if self.constraints is None else self.constraints.key]
    parts = [self.name, sources_fingerprint(Path(__file__).parent.parent), osqp.__version__, repr(self.options),
             f"{self.n}|{self.np}|{self.m}", *functions]  # fmt: skip
    return problem_key_of("sqp", parts)

  @cached_property
  def _layout_facts(self) -> tuple[bool, tuple[int, ...], tuple[int, ...]]:
    """What a call needs of the stage layout: whether the QPs are staged, `equality_rows` and `fixed_variables`.
    Stored in the cache beside `problem_key`, so that a warm process reads them instead of deriving the patterns the
    layout is found in."""
    where = None if self.problem_key is None else f"meta/{self.problem_key}.json"
    if where is not None and (text := read_artifact(where)) is not None:
      staged, rows, fixed = json.loads(text)
      return bool(staged), tuple(rows), tuple(fixed)
    layout = self.layout
    rows = () if layout is None else tuple(r for r, (kind, _, _) in enumerate(layout.rows) if kind != "stage")
    fixed = () if layout is None or not layout.initial_bounds else tuple(
      j for j, (k, i) in enumerate(layout.variables) if k == 0 and i < layout.nx
    )  # fmt: skip
    if where is not None:
      write_atomic(cache_dir() / where, json.dumps([layout is not None, rows, fixed]))
    return layout is not None, rows, fixed

  @property
  def _kept_equal(self) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """The rows of g and the variables the QPs keep equal, as the generated header lists them."""
    lists = (
      ("equality_rows", self.equality_rows, "Rows of g the QPs keep at lbg = ubg (initial and dynamics rows)"),
      ("fixed_variables", self.fixed_variables, "Variables the QPs keep at lbx = ubx (x_0 fixed by its bounds)"),
    )
    return tuple(entry for entry in lists if entry[1])

  def _check_equalities(self, lbx: NDArray[np.float64], ubx: NDArray[np.float64], lbg: NDArray[np.float64],
                        ubg: NDArray[np.float64]) -> None:  # fmt: skip
    """ValueError unless the rows and variables the stage layout keeps equal are given equal bounds."""
    how = "given" if self.stages is not None else "found in the patterns"
    fix = "solve without the layout: SQPOptions(qp=SparseIPMOptions())"
    rows = np.asarray(self.equality_rows, dtype=np.int64)
    if (bad := rows[lbg[rows] != ubg[rows]]).size:
      assert self.layout is not None
      r = int(bad[0])
      kind, k, i = self.layout.rows[r]
      what = "the initial value of x_0" if kind == "initial" else f"the dynamics of x_{k + 1}"
      raise ValueError(
        f"{self.name}: lbg and ubg must be equal at {self.labels.row(r)[1]}: it is {what}[{i}] in the stage layout "
        f"{how}, which the Riccati QP solver keeps an equality (got lbg = {lbg[r]}, ubg = {ubg[r]}); for other bounds "
        f"there, {fix}"
      )
    fixed = np.asarray(self.fixed_variables, dtype=np.int64)
    if (bad := fixed[(lbx[fixed] != ubx[fixed]) | ~np.isfinite(lbx[fixed])]).size:
      assert self.layout is not None
      j = int(bad[0])
      raise ValueError(
        f"{self.name}: lbx and ubx must be equal and finite at {self.labels.variable(j)[1]}: it is "
        f"x_0[{self.layout.variables[j][1]}] in the stage layout {how}, fixed by its bounds (no row x_0 = x0 fixes "
        f"it), which the Riccati QP solver keeps at its initial value (got lbx = {lbx[j]}, ubx = {ubx[j]}); write "
        f"x_0 = x0 as constraint rows, or {fix}"
      )

  @cached_property
  def hard_rows(self) -> tuple[int, ...]:
    """For each row of g, then each bound on x: 1 when the elastic QPs keep it hard (the restoration then weighs its
    violation above the others'), else 0."""
    if (layout := self.layout) is None:
      return (0,) * self.m + (1,) * self.n
    rows = tuple(int(kind != "stage") for kind, _, _ in layout.rows)
    fixed = set(self.fixed_variables)
    return rows + tuple(int(i >= layout.nx or j in fixed) for j, (_, i) in enumerate(layout.variables))

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """f, ∇f, g, ∂g/∂x, the Lagrangian Hessian and the QP backends."""
    deps: list[FunctionBase] = [self.cost, self.gradient, cast(FunctionBase, self.hessian)]
    if self.constraints is not None and self.jacobian is not None:
      deps[2:2] = [self.constraints_code or self.constraints, cast(FunctionBase, self.jacobian)]
    return (*deps, self.qp, *([] if self.elastic is None else [self.elastic]))

  @property
  def reuses_steps(self) -> bool:
    """Whether g's evaluation takes the integrator steps the last ∂g/∂x evaluation kept, where a stage's inputs are
    the same (`constraints_code` a StepTaker of `jacobian`): a real-time iteration's feedback then evaluates g at its
    linearization point without stepping the dynamics again."""
    code = self.constraints_code
    return isinstance(code, StepTaker) and self.jacobian is not None and code.takes_steps_from(self.jacobian)

  @cached_property
  def labels(self) -> NLPLabels:
    """Names of the NLP's functions, rows and variables, for messages."""
    return NLPLabels(self.nlp)

  @cached_property
  def context(self) -> _SolverContext:
    """The names, sizes, options and tables the templates fill in."""
    normal, elastic, tables = self._qp_layout
    jac, g = self.jacobian, self.constraints_code or self.constraints
    evaluations = [self.cost, self.gradient, self.hessian, *([] if jac is None else [g, jac])]
    return _SolverContext(
      name=self.name, n=self.n, m=self.m, np=self.np, cost=self.cost.name, gradient=self.gradient.name,
      constraints="" if g is None else g.name, jacobian="" if jac is None else jac.name,
      hessian=self.hessian.name, evaluations=tuple(f.name for f in evaluations if f is not None),
      nnz_jac=0 if jac is None else jac.nnz, nnz_hess=self.hessian.nnz, nnz_P=normal.p_pattern.nnz,
      nnz_A=normal.a_pattern.nnz, nnz_Ae=elastic.a_pattern.nnz, qp=self.qp.name,
      elastic="" if self.elastic is None else self.elastic.name, elastic_rows=self.layout is not None,
      direct_load=self.direct_load, kept_equal=self._kept_equal, reuses_steps=self.reuses_steps,
      convex_hessian=self.convex_hessian,
      options=self.options, tables=tuple(tables.items()), real=cpp_real(self.scalar),
    )  # fmt: skip

  # *** JIT ***

  @cached_property
  def _call(self) -> Any:
    return self.handle.entry("call", ctypes.c_int, *[ctypes.c_void_p] * 14)

  def __call__(
    self,
    x0: ArrayLike,
    p: ArrayLike | None,
    lbx: ArrayLike,
    ubx: ArrayLike,
    lbg: ArrayLike = (),
    ubg: ArrayLike = (),
    lam_g0: ArrayLike | None = None,
    lam_x0: ArrayLike | None = None,
    *,
    max_iter: int | None = None,
    tol: float | None = None,
    max_time: float | None = None,
  ) -> SQPResult:
    """Solve from x0 (optionally warm-starting the multipliers: without lam_g0 the equality rows' are estimated at
    x0, as IPOPT's least-squares start, by the QP of the equalities with the identity for Hessian, and kept if none
    exceeds 1e3; the inequality rows' start at 0); ±inf bounds mean none. max_iter (at most the
    options' max_iter), tol and max_time (seconds) replace the options' for this call. p may be None when the
    problem has no parameters (np = 0)."""
    n, m = self.n, self.m
    inputs = [self._vector("x0", x0, n, finite=True), self._vector("p", p, self.np, finite=True),
              self._vector("lbx", lbx, n), self._vector("ubx", ubx, n), self._vector("lbg", lbg, m),
              self._vector("ubg", ubg, m),
              np.zeros(m) if lam_g0 is None else self._vector("lam_g0", lam_g0, m, finite=True),
              np.zeros(n) if lam_x0 is None else self._vector("lam_x0", lam_x0, n, finite=True)]  # fmt: skip
    for lo, hi, what in ((inputs[2], inputs[3], "x"), (inputs[4], inputs[5], "g")):
      check_bounds(self.name, f"bounds lb{what}, ub{what}", lo, hi, lambda i: f"index {i[0]}")
    self._check_equalities(*inputs[2:6])
    limits = self.stats_reader.limits(max_iter, tol, max_time)
    options = SQP_OPTIONS.mirror(**limits._asdict(), estimate_multipliers=lam_g0 is None)  # no lam_g0: estimated
    dtype = np.dtype(self.scalar)
    x0_, p_, lbx_, ubx_, lbg_, ubg_, lam_g0_, lam_x0_ = (a.astype(dtype, copy=False) for a in inputs)
    x, f, lam_g, lam_x = np.empty(n, dtype), np.empty(1, dtype), np.empty(m, dtype), np.empty(n, dtype)
    (history, ihistory), scalars = self.stats_reader.buffers(), SQP_SCALARS.mirror()
    bounds_struct = SQP_BOUNDS.mirror(*(b.ctypes.data for b in (lbx_, ubx_, lbg_, ubg_)))
    with self._lock:  # NOTE: the first call loads the library: one workspace, however many threads call at once
      self._call(x0_.ctypes.data, p_.ctypes.data, ctypes.addressof(bounds_struct), lam_g0_.ctypes.data,
                 lam_x0_.ctypes.data, ctypes.addressof(options), x.ctypes.data, f.ctypes.data, lam_g.ctypes.data,
                 lam_x.ctypes.data, history.ctypes.data, ihistory.ctypes.data,
                 ctypes.addressof(scalars), self.handle.pointer)  # fmt: skip
    bounds = (lbx_, ubx_, lbg_, ubg_)
    iterations, status, stats = self.stats_reader.unpack(history, ihistory, scalars, bounds, self.labels)
    x, lam_g, lam_x = (a.astype(np.float64, copy=False) for a in (x, lam_g, lam_x))
    at = (p_.astype(np.float64), *(b.astype(np.float64) for b in bounds))
    return SQPResult(x, float(f[0]), lam_g, lam_x, status, iterations, stats,
                     lambda: self.sensitivity_at(x, at[0], lam_g, lam_x, at[1:]))  # fmt: skip

  def sensitivity_at(self, x: ArrayLike, p: ArrayLike, lam_g: ArrayLike, lam_x: ArrayLike,
                     bounds: tuple[ArrayLike, ...]) -> Sensitivity:  # fmt: skip
    """The derivatives of the solution (x, lam_g, lam_x) at parameter p, with bounds (lbx, ubx, lbg, ubg), with
    respect to p (`anvil.sqp.sensitivity`, whose exact Hessian is its own: a solver with an approximate one, as
    Gauss-Newton, converges to the same KKT point and multipliers); ValueError where the KKT matrix is singular."""
    n, m = self.n, self.m
    x_, p_ = self._vector("x", x, n, finite=True), self._vector("p", p, self.np, finite=True)
    lam_g_, lam_x_ = self._vector("lam_g", lam_g, m, finite=True), self._vector("lam_x", lam_x, n, finite=True)
    lbx, ubx, lbg, ubg = (self._vector(w, b, size) for w, b, size in zip(("lbx", "ubx", "lbg", "ubg"), bounds,
                                                                         (n, n, m, m), strict=True))  # fmt: skip
    return self.sensitivity_function(x_, p_, lam_g_, lam_x_, (lbx, ubx, lbg, ubg))

  def _vector(self, what: str, value: ArrayLike | None, size: int, finite: bool = False) -> NDArray[np.float64]:
    if value is None and what == "p" and size:
      raise ValueError(f"{self.name}: p is required: the problem has {size} parameters; pass p of length {size}")
    return float_array(self.name, what, np.zeros(0) if value is None and not size else value, (size,), finite=finite)

  @cached_property
  def stats_reader(self) -> StatsReader:
    """Checks a call's limits and reads the Stats it filled."""
    return StatsReader(self.name, self.options, self.m, self._layout_facts[0], self.function_name)

  def function_name(self, which: int) -> str:
    """The name of the generated function of code `which` (anvil::sqp::Evaluated: cost, gradient, constraints,
    Jacobian, Hessian)."""
    return {0: self.cost.name, 1: self.gradient.name, 2: getattr(self.constraints, "name", ""),
            3: getattr(self.jacobian, "name", ""), 4: self.hessian.name}[which]  # fmt: skip


def _pattern(fn: SparseDerivative, shape: tuple[int, int]) -> sp.csc_array:
  return sp.csc_array((np.ones(fn.nnz), fn.indices, fn.indptr), shape=shape)


def _sorted(m: Any) -> sp.csc_array:
  m = sp.csc_array(m)
  m.sum_duplicates()
  m.sort_indices()
  return m


def _positions(pattern: sp.csc_array, part: Any) -> tuple[int, ...]:
  """For each stored entry of `part` (CSC order), its position among the stored entries of `pattern` (KeyError when
  `pattern` has no such entry)."""
  return tuple(int(k) for k in entry_positions(pattern, *stored_coordinates(sp.csc_array(part))))
